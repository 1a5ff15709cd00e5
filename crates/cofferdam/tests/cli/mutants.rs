//! Mutation tests (issue 17): a debug build skips one control's install step when
//! `COFFERDAM_TEST_MUTANT` names it (`cofferdam_sandbox::mutant`), leaving its observation
//! code as it is. For every mutant, on each tier that installs the control, one run of
//! `true` must either refuse (exit 125, required where the tier requires the control) or
//! write a bundle that does not claim the control: its row is not `enforced`, the summary's
//! dimension is not `enforced`, the dimension's safety boolean is false.

use crate::apply::sealed_host;
use crate::common::Sandbox;
use cofferdam_record::EnforcementTier;
use cofferdam_record::bundle::{ControlMechanism, Requirement, tier_controls};
use cofferdam_sandbox::mutant::{self, EXEMPT, MUTANTS, Mutant};
use serde_json::Value;

/// The bundle of the run (the only job of the sandbox's store), when one was written.
fn bundle(s: &Sandbox) -> Option<Value> {
    let jobs = std::fs::read_dir(s.store.path().join("jobs")).ok()?;
    jobs.flatten()
        .map(|e| e.path().join("run-bundle.json"))
        .find(|p| p.exists())
        .map(|p| serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap())
}

fn row<'b>(b: &'b Value, m: &Mutant) -> Option<&'b Value> {
    b["executor_observations"]["controls"]
        .as_array()?
        .iter()
        .find(|c| {
            c["mechanism"] == m.mechanism.wire_name() && c["dimension"] == m.dimension.wire_name()
        })
}

/// One run of `true` on `tier` (`sealed`/`scoped`) with `mutant` set (or none).
fn run(tier: &str, mutant: Option<&Mutant>) -> (Option<i32>, Option<Value>, String) {
    let s = Sandbox::new();
    std::fs::create_dir(s.work.path().join("locked")).unwrap();
    s.write("locked/file", "original\n");
    let mut c = s.cmd();
    c.args(["run", "-q", "--tier", tier]);
    if let Some(m) = mutant {
        c.env(mutant::ENV, m.name);
        if m.name == mutant::READ_ONLY_SUBTREE {
            c.args(["--read-only", "locked"]);
        }
    }
    // A limit only a cgroup enforces where one can be made (`pids.max`, root here). Not for
    // a user: without a cgroup `--pids` is RLIMIT_NPROC, which counts every task of the user,
    // so with the other tests' runs going on at once the command's fork could fail.
    if mutant.is_none_or(|m| m.name == mutant::CGROUP_JOIN) && rustix::process::geteuid().is_root()
    {
        c.args(["--pids", "64"]);
    }
    let out = c.args(["--", "true"]).output().unwrap();
    let text = format!(
        "{tier} {:?}: exit {:?}\nstderr: {}",
        mutant.map(|m| m.name),
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), bundle(&s), text)
}

fn tier_of(name: &str) -> EnforcementTier {
    if name == "sealed" {
        EnforcementTier::MountnsPivotRootLandlockSeccomp
    } else {
        EnforcementTier::LandlockSeccomp
    }
}

fn required(tier: &str, m: &Mutant) -> bool {
    tier_controls(tier_of(tier)).required.iter().any(|r| {
        r.mechanism == m.mechanism
            && r.dimension == m.dimension
            && r.requirement == Requirement::Hard
    })
}

fn safety_key(dimension: &str) -> Option<&'static str> {
    match dimension {
        "filesystem_read" => Some("filesystem_read_non_bypassable"),
        "filesystem_write" => Some("filesystem_write_non_bypassable"),
        "network" => Some("network_non_bypassable"),
        _ => None,
    }
}

/// Whether this build has the mutant switch and the host runs the sealed tier (SKIP-HOST).
fn mutants_can_run() -> bool {
    if !mutant::COMPILED_IN {
        println!("SKIP-HOST a release build has no mutant switch");
        return false;
    }
    sealed_host()
}

#[test]
fn every_control_mechanism_has_a_mutant_or_a_stated_exemption() {
    for mech in ControlMechanism::ALL {
        let mutants = MUTANTS.iter().filter(|m| m.mechanism == mech).count();
        let exempt = EXEMPT.iter().filter(|(e, _)| *e == mech).count();
        assert!(
            (mutants > 0) != (exempt > 0) && exempt <= 1,
            "{mech}: add a mutant to cofferdam_sandbox::mutant::MUTANTS, or an exemption \
             with its reason to EXEMPT (not both)"
        );
    }
    for (m, why) in EXEMPT {
        assert!(!why.trim().is_empty(), "{m}: an exemption needs its reason");
    }
}

#[test]
fn every_mutant_leaves_its_control_unclaimed_or_refuses_the_run() {
    if !mutants_can_run() {
        return;
    }
    let root = rustix::process::geteuid().is_root();
    let (mut ran, mut skipped) = (0, 0);
    for tier in ["sealed", "scoped"] {
        let (code, base, text) = run(tier, None);
        assert_eq!(code, Some(0), "{text}");
        let base = base.expect("a bundle");
        for m in MUTANTS {
            if !(if tier == "sealed" { m.sealed } else { m.scoped }) {
                continue;
            }
            // The unmutated run claims the control (the read_only subtree rides on the
            // pivot_root row, claimed without --read-only too): the mutant has something
            // to take away.
            if m.name == mutant::CAP_DROP && tier == "scoped" && !root {
                skipped += 1;
                // An unprivileged host process holds no capability, and its bounding set
                // (which it cannot empty) is `partial` with or without the drop.
                println!("SKIP-HOST cap_drop on the scoped tier needs root to have an effect");
                continue;
            }
            let claimed = row(&base, m).map(|r| r["status"].clone());
            if m.name == mutant::CGROUP_JOIN && claimed != Some("enforced".into()) {
                println!("SKIP-HOST cgroup_join on {tier}: this host gives the run no cgroup");
                skipped += 1;
                continue;
            }
            // The metadata filter is `partial` by design (its residual is named): its
            // mutant must make it `failed`.
            let partial = m.name == mutant::METADATA_FILTER;
            let want = if partial { "partial" } else { "enforced" };
            assert_eq!(claimed, Some(want.into()), "{tier} {}: {base}", m.name);
            ran += 1;
            let (code, b, text) = run(tier, Some(m));
            if required(tier, m) {
                assert_eq!(code, Some(125), "required, so refused: {text}");
            } else {
                assert!(matches!(code, Some(0) | Some(125)), "{text}");
            }
            let Some(b) = b else {
                assert_eq!(code, Some(125), "no bundle, so refused: {text}");
                continue;
            };
            let r = row(&b, m).unwrap_or_else(|| panic!("a row for {}: {text}", m.name));
            assert_ne!(r["status"], "enforced", "{text}\nrow: {r}");
            if partial {
                assert_eq!(r["status"], "failed", "{text}\nrow: {r}");
            }
            let dim = m.dimension.wire_name();
            let summary = &b["executor_observations"]["summary"][dim];
            assert_ne!(summary, "enforced", "{text}\nsummary: {summary}");
            if let Some(key) = safety_key(dim) {
                assert_eq!(b["safety"][key], false, "{text}\nsafety: {}", b["safety"]);
            }
        }
    }
    println!("{ran} mutant runs, {skipped} skipped");
    let every = MUTANTS
        .iter()
        .map(|m| usize::from(m.sealed) + usize::from(m.scoped));
    assert_eq!(ran + skipped, every.sum::<usize>());
}

/// The rows of `mechanism` in a bundle.
fn rows<'b>(b: &'b Value, mechanism: &str) -> Vec<&'b Value> {
    b["executor_observations"]["controls"]
        .as_array()
        .map(|a| a.iter().filter(|c| c["mechanism"] == mechanism).collect())
        .unwrap_or_default()
}

#[test]
fn a_mount_reading_that_fails_is_unknown_not_failed_and_refuses_the_run() {
    if !mutants_can_run() {
        return;
    }
    let by_name = |name: &str| MUTANTS.iter().find(|m| m.name == name).unwrap();
    // /proc/self/mountinfo unreadable after the pivot: every mount row read from it.
    let (code, b, text) = run("sealed", Some(by_name(mutant::MOUNTINFO_UNREAD)));
    assert_eq!(code, Some(125), "{text}");
    assert!(text.contains("/proc/self/mountinfo"), "{text}");
    let b = b.expect("a bundle of the refused run");
    for (mechanism, key) in [
        ("pivot_root", "read_only_read_back"),
        ("proc_mask", "read_back"),
        ("secrets_hidden", "read_back"),
        ("minimal_dev", "size_read_back"),
        ("tmpfs", "size_read_back"),
    ] {
        let r = rows(&b, mechanism);
        assert_eq!(r.len(), 1, "{mechanism}: {text}");
        assert_eq!(r[0]["status"], "unknown", "{mechanism}: {}", r[0]);
        assert_eq!(r[0]["details"][key], Value::Null, "{mechanism}: {}", r[0]);
        let reason = r[0]["reason"].as_str().unwrap_or("");
        assert!(reason.contains("not read back"), "{mechanism}: {reason}");
    }
    let summary = &b["executor_observations"]["summary"];
    assert_eq!(summary["filesystem_read"], "unknown", "{summary}");
    assert_eq!(summary["kernel_surface"], "unknown", "{summary}");
    for key in [
        "filesystem_non_bypassable",
        "filesystem_read_non_bypassable",
        "filesystem_write_non_bypassable",
    ] {
        assert_eq!(b["safety"][key], false, "{key}: {}", b["safety"]);
    }
    // The strict reader accepts it: an honest record of a refused run.
    let text = serde_json::to_vec(&b).unwrap();
    cofferdam_record::read_bundle(&text).unwrap_or_else(|e| panic!("{e}"));

    // statvfs of the read-only binds failing: only pivot_root's read-only reading is unknown.
    let (code, b, text) = run("sealed", Some(by_name(mutant::STATVFS_UNREAD)));
    assert_eq!(code, Some(125), "{text}");
    let b = b.expect("a bundle of the refused run");
    let r = rows(&b, "pivot_root");
    assert_eq!(r[0]["status"], "unknown", "{}", r[0]);
    assert_eq!(r[0]["details"]["read_only_read_back"], Value::Null);
    assert!(
        r[0]["reason"]
            .as_str()
            .unwrap_or("")
            .contains("statvfs /usr"),
        "{}",
        r[0]
    );
    assert_eq!(rows(&b, "secrets_hidden")[0]["status"], "enforced");
}

#[test]
fn an_init_that_fails_before_the_go_is_told_with_its_own_reason() {
    if !mutants_can_run() {
        return;
    }
    for tier in ["sealed", "scoped"] {
        let s = Sandbox::new();
        let mut c = s.cmd();
        c.env(mutant::ENV, mutant::INIT_EARLY_FAILURE);
        c.args(["run", "-q", "--tier", tier]);
        // The cgroup placement is what used to report instead (root: `pids.max`).
        if rustix::process::geteuid().is_root() {
            c.args(["--pids", "64"]);
        }
        let out = c.args(["--", "true"]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{tier}: {err}");
        assert!(
            err.contains("failed on purpose before the go"),
            "{tier}: the init's reason is lost: {err}"
        );
        assert!(
            !err.contains("the sandbox could not be set up: cannot place"),
            "{tier}: {err}"
        );
        let b = bundle(&s).unwrap_or_else(|| panic!("{tier}: a bundle: {err}"));
        assert_eq!(b["run"]["state"], "failed", "{tier}: {}", b["run"]);
        let failure = b["run"]["failure"].to_string();
        assert!(
            failure.contains("failed on purpose before the go"),
            "{tier}: {failure}"
        );
    }
}
