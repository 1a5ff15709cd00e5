//! `cofferdam k8s job` (issue 24): the manifest is a `batch/v1` Job whose container runs
//! the run with the given policy flags and exports its job; bad names and policy values are
//! usage errors; it validates against the Kubernetes API's strict JSON Schema for a Job,
//! pinned in `tests/k8s-schema/` (its PROVENANCE says from where). What a cluster would do
//! with it beyond its schema is not checked here (no cluster).

use crate::common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn schema_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/k8s-schema")
}

/// The sha256 of each pinned file, as its PROVENANCE records it: `  NAME.json` at an
/// indent of two, then its first `sha256 HEX` line.
fn recorded_sha256() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(schema_dir().join("PROVENANCE")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(name) = line
            .strip_prefix("  ")
            .and_then(|l| l.split_whitespace().next())
        else {
            continue;
        };
        if !name.ends_with(".json") || line.starts_with("   ") {
            continue;
        }
        let hex = lines[i + 1..]
            .iter()
            .find_map(|l| l.trim().strip_prefix("sha256 "))
            .unwrap();
        out.push((name.to_owned(), hex.to_owned()));
    }
    out
}

/// The strict `batch/v1` Job schema with its definitions, each file checked against its
/// recorded sha256 first (by coreutils' `sha256sum`, so no digest crate for one test).
fn job_validator() -> jsonschema::Validator {
    let pinned = recorded_sha256();
    let names: Vec<&str> = pinned.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["job-batch-v1.json", "_definitions.json"],
        "PROVENANCE"
    );
    for (name, hex) in &pinned {
        let out = std::process::Command::new("sha256sum")
            .arg(schema_dir().join(name))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let got = String::from_utf8(out.stdout).unwrap();
        assert_eq!(
            got.split_whitespace().next(),
            Some(hex.as_str()),
            "{name} is not the file PROVENANCE pins"
        );
    }
    let read = |name: &str| -> Value {
        serde_json::from_slice(&std::fs::read(schema_dir().join(name)).unwrap()).unwrap()
    };
    let defs = read("_definitions.json");
    let job = read("job-batch-v1.json");
    let id = defs["$id"].as_str().unwrap().to_owned();
    let registry = jsonschema::Registry::new()
        .add(id, defs)
        .unwrap()
        .prepare()
        .unwrap();
    jsonschema::options()
        .with_registry(&registry)
        .build(&job)
        .unwrap()
}

fn schema_errors(v: &jsonschema::Validator, m: &Value) -> Vec<String> {
    v.iter_errors(m)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

#[test]
fn the_manifests_validate_against_the_pinned_kubernetes_schema() {
    let v = job_validator();
    let s = Sandbox::new();
    let cases: [&[&str]; 4] = [
        &["--", "true"],
        &[
            "--no-user-namespaces",
            "--name",
            "scoped-1",
            "--",
            "make",
            "test",
        ],
        &[
            "--memory",
            "2G",
            "--pids",
            "256",
            "--cpus",
            "1.5",
            "--timeout",
            "30m",
            "--tmp-size",
            "64M",
            "--label",
            "team=infra",
            "--label",
            "example.com/model=m-1.2",
            "--env",
            "TOKEN",
            "--network",
            "allow",
            "--allow-net",
            "example.com:443",
            "--image",
            "reg.example/agent:2",
            "--",
            "sh",
            "-c",
            "echo 'it''s' > f",
        ],
        &[
            "--containment",
            "sealed",
            "--read-only",
            "docs",
            "--",
            "true",
        ],
    ];
    for args in cases {
        let out = s.cmd().args(["k8s", "job"]).args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        let m = json_of(&out);
        let errors = schema_errors(&v, &m);
        assert!(errors.is_empty(), "{args:?}: {errors:#?}");
    }
    let out = s
        .cmd()
        .args(["k8s", "job", "--label", "team=infra", "--", "true"])
        .output()
        .unwrap();
    let good = json_of(&out);
    assert_eq!(
        good["spec"]["template"]["metadata"]["labels"]["team"],
        "infra"
    );
    // The schema can fail: a field of the wrong type, an unknown field (strict), a
    // misspelt one, a wrong kind are each refused where they are.
    type Mutation = fn(&mut Value);
    let mutations: [(&str, &str, Mutation); 5] = [
        ("/spec/template/spec/hostUsers", "wrong type", |m| {
            m["spec"]["template"]["spec"]["hostUsers"] = "no".into()
        }),
        ("/spec/template/spec", "unknown field", |m| {
            m["spec"]["template"]["spec"]["sandbox"] = true.into()
        }),
        (
            "/spec/template/spec/containers/0/securityContext",
            "misspelt",
            |m| {
                let sc = &mut m["spec"]["template"]["spec"]["containers"][0]["securityContext"];
                sc["apparmorProfile"] = sc["appArmorProfile"].take();
                sc.as_object_mut().unwrap().remove("appArmorProfile");
            },
        ),
        ("/kind", "wrong kind", |m| m["kind"] = "CronJob".into()),
        ("/spec/backoffLimit", "wrong type", |m| {
            m["spec"]["backoffLimit"] = "0".into()
        }),
    ];
    for (at, what, mutate) in mutations {
        let mut m = good.clone();
        mutate(&mut m);
        let errors = schema_errors(&v, &m);
        assert!(
            errors.iter().any(|e| e.starts_with(&format!("{at}:"))),
            "{what} at {at} was not refused: {errors:#?}"
        );
    }
    // A label Kubernetes would refuse is a usage error here, not a manifest the API server
    // refuses later.
    let out = s
        .cmd()
        .args(["k8s", "job", "--label", "team=a b", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a Kubernetes label"),
        "{out:?}"
    );
}

#[test]
fn the_job_manifest_carries_the_policy_and_refuses_bad_input() {
    let s = Sandbox::new();
    let out = s
        .cmd()
        .args(["k8s", "job", "--timeout", "30m", "--network", "none"])
        .args([
            "--name",
            "fix-1",
            "--image",
            "reg.example/agent:1",
            "--",
            "make",
            "test",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let m = json_of(&out);
    assert_eq!(m["apiVersion"], "batch/v1");
    assert_eq!(m["kind"], "Job");
    assert_eq!(m["metadata"]["name"], "fix-1");
    let pod = &m["spec"]["template"]["spec"];
    assert_eq!(pod["hostUsers"], false);
    assert_eq!(pod["restartPolicy"], "Never");
    let c = &pod["containers"][0];
    assert_eq!(c["image"], "reg.example/agent:1");
    let script = c["command"][2].as_str().unwrap();
    assert!(
        script.contains("'--network=none' '--timeout=30m' '--' 'make' 'test'"),
        "{script}"
    );
    assert!(script.contains("cofferdam export last -o /export/job.tar.zst"));
    let scoped = s
        .cmd()
        .args(["k8s", "job", "--no-user-namespaces", "--", "true"])
        .output()
        .unwrap();
    let m = json_of(&scoped);
    assert!(m["spec"]["template"]["spec"].get("hostUsers").is_none());
    assert!(
        m["spec"]["template"]["spec"]["containers"][0]["command"][2]
            .as_str()
            .unwrap()
            .contains("'--tier=scoped'")
    );
    // Variables: a value is defined by the container, a bare name comes from the Job's
    // Secret; the run is given names only, so no value is in the pod's command line.
    let out = s
        .cmd()
        .args(["k8s", "job", "--name", "fix-2", "--env", "MODE=fast-4242"])
        .args(["--env", "API_TOKEN", "--", "true"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let m = json_of(&out);
    let errors = schema_errors(&job_validator(), &m);
    assert!(errors.is_empty(), "{errors:#?}");
    let c = &m["spec"]["template"]["spec"]["containers"][0];
    let vars = c["env"].as_array().unwrap();
    assert!(
        vars.contains(&serde_json::json!({"name": "MODE", "value": "fast-4242"})),
        "{vars:?}"
    );
    assert!(
        vars.contains(&serde_json::json!({"name": "API_TOKEN", "valueFrom":
            {"secretKeyRef": {"name": "fix-2-env", "key": "API_TOKEN"}}})),
        "{vars:?}"
    );
    let script = c["command"][2].as_str().unwrap();
    assert!(
        script.contains("'--env=MODE' '--env=API_TOKEN'") && !script.contains("fast-4242"),
        "{script}"
    );
    let note = String::from_utf8_lossy(&out.stderr);
    assert!(
        note.contains("kubectl create secret generic fix-2-env --from-literal=API_TOKEN="),
        "{note}"
    );
    for bad in [
        &["--name", "Bad_Name", "--", "true"][..],
        &["--timeout", "soon", "--", "true"],
        &["--"],
        &["--env", "HOME", "--", "true"],
        &["--env", "COFFERDAM_HOME=/x", "--", "true"],
    ] {
        let out = s.cmd().args(["k8s", "job"]).args(bad).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {out:?}");
    }
}

/// The pod as a container runtime would make it, in a mount and pid namespace of this host
/// (a user namespace too when not root, as `hostUsers: false` gives): a fresh root with the
/// host's /usr, /etc, /dev and /sys, the binary as the image's, and the manifest's three
/// volumes as folders of the test; its command line is the manifest's, under the manifest's
/// environment. Its export is then imported and applied here. Not checked: the runtime's
/// seccomp and AppArmor (both Unconfined in the manifest), an image other than this host.
const POD: &str = r#"set -e
R=$1/root; mkdir -p $R
mount -t tmpfs pod $R
for d in usr etc dev proc sys; do mkdir -p $R/$d; done
for d in usr etc dev sys; do mount --rbind /$d $R/$d; done
for l in bin sbin lib lib64; do if [ -e /$l ]; then ln -s usr/$l $R/$l; fi; done
mkdir -p $R/work $R/export $R/var/lib/cofferdam $R/home/agent $R/tmp $R/opt/bin $R/old
mount --bind $1/work $R/work; mount --bind $1/export $R/export
mount --bind $1/store $R/var/lib/cofferdam; mount --bind $1/home $R/home/agent
cp $2 $R/opt/bin/cofferdam; cp $1/script.sh $R/script.sh
cd $R; /usr/sbin/pivot_root . old; mount -t proc proc /proc; umount -l /old
cd /work
exec env -i PATH=/opt/bin:/usr/bin:/bin COFFERDAM_HOME=/var/lib/cofferdam HOME=/home/agent sh /script.sh
"#;

#[test]
fn the_pods_command_runs_in_a_pod_like_root_and_its_export_imports_here() {
    let root = rustix::process::geteuid().is_root();
    if !require(
        "unshare(1) and pivot_root(8), and user namespaces when not root",
        std::process::Command::new("unshare")
            .args(if root {
                &["-m", "true"][..]
            } else {
                &["-Urm", "true"]
            })
            .status()
            .is_ok_and(|s| s.success())
            && std::path::Path::new("/usr/sbin/pivot_root").exists(),
    ) {
        return;
    }
    let s = Sandbox::new();
    let pod = tempfile::tempdir().unwrap();
    for d in ["work", "export", "store", "home"] {
        std::fs::create_dir(pod.path().join(d)).unwrap();
    }
    std::fs::write(pod.path().join("work/f.txt"), "hello\n").unwrap();
    let out = s
        .cmd()
        .args([
            "k8s",
            "job",
            "--timeout",
            "60s",
            "--",
            "sh",
            "-c",
            "echo it\\'s >> f.txt",
        ])
        .output()
        .unwrap();
    let m = json_of(&out);
    let c = &m["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["command"][0], "sh");
    assert_eq!(c["command"][1], "-c");
    std::fs::write(
        pod.path().join("script.sh"),
        c["command"][2].as_str().unwrap(),
    )
    .unwrap();
    std::fs::write(pod.path().join("pod.sh"), POD).unwrap();
    let bin = env!("CARGO_BIN_EXE_cofferdam");
    let ran = std::process::Command::new("unshare")
        .args(if root { &["-m"][..] } else { &["-Urm"] })
        .args(["-p", "-f", "--propagation", "private", "sh"])
        .arg(pod.path().join("pod.sh"))
        .arg(pod.path())
        .arg(bin)
        .output()
        .unwrap();
    assert!(ran.status.success(), "{ran:?}");
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(pod.path().join("export/run.json")).unwrap())
            .unwrap();
    assert_eq!(summary["exit_code"], 0, "{summary}");
    assert_eq!(summary["changes"], 1, "{summary}");
    // The pod's tree is untouched; the export imports and applies onto a copy of it here.
    assert_eq!(
        std::fs::read_to_string(pod.path().join("work/f.txt")).unwrap(),
        "hello\n"
    );
    std::fs::write(s.work.path().join("f.txt"), "hello\n").unwrap();
    let imported = s
        .cmd()
        .args(["--json", "import"])
        .arg(pod.path().join("export/job.tar.zst"))
        .arg("--workdir")
        .arg(s.work.path())
        .output()
        .unwrap();
    assert!(imported.status.success(), "{imported:?}");
    let job = json_of(&imported)["job"].as_str().unwrap().to_owned();
    let applied = s.cmd().args(["apply", &job]).output().unwrap();
    assert!(applied.status.success(), "{applied:?}");
    assert_eq!(
        std::fs::read_to_string(s.work.path().join("f.txt")).unwrap(),
        "hello\nit's\n"
    );
}
