//! The Kubernetes Job manifest of `cofferdam k8s job`: one pod whose container runs
//! `cofferdam run` with the task's policy flags and then `cofferdam export` of that job to
//! a volume (`/export`), so the stage leaves the pod as one archive for `cofferdam import`.
//! Printed as JSON, which `kubectl apply -f` reads as it reads YAML, so no YAML writer is
//! needed and the output is exactly what a JSON Schema validator checks.
//!
//! The pod settings and why:
//! - `hostUsers: false` (a user namespace per pod) when the cluster supports it: the
//!   sealed tier needs to create user, mount and pid namespaces, which an unprivileged
//!   container can only do inside its own user namespace. On a cluster without the
//!   feature, `--no-user-namespaces` leaves `hostUsers` out and caps the run at
//!   `--tier scoped` (Landlock, seccomp, no namespaces).
//! - `seccompProfile: Unconfined`: the container runtime's default profile refuses
//!   `unshare(2)`, `mount(2)` and `pivot_root(2)` with namespace flags, which the sealed
//!   tier's init calls; cofferdam installs its own seccomp filter on the workload.
//! - `appArmorProfile: Unconfined`: the runtime's default AppArmor profile denies `mount`,
//!   which the sealed tier needs inside its namespaces, and on Ubuntu 23.10+ nodes
//!   unprivileged user namespaces are granted only to profiles that allow them; cofferdam's
//!   Landlock rules and mount namespace confine the workload instead. (The field needs
//!   Kubernetes 1.30+; older clusters take the `container.apparmor.security.beta.
//!   kubernetes.io` annotation.)
//! - `allowPrivilegeEscalation: false` and every capability dropped: cofferdam needs none
//!   outside the user namespace it makes.
//!
//! Owns the manifest's shape; may not run anything. Pure.

use serde_json::{Value, json};
use std::collections::BTreeMap;

/// What the manifest is made from.
#[derive(Debug, Clone)]
pub struct JobSpec {
    /// The Job's name (a DNS-1123 label).
    pub name: String,
    /// The container image: cofferdam and the agent installed.
    pub image: String,
    /// The `cofferdam run` policy flags.
    pub run_flags: Vec<String>,
    /// The command.
    pub command: Vec<String>,
    /// No user namespace per pod: the run is capped at the scoped tier.
    pub scoped_only: bool,
    /// The task's labels: the run's (`--label`, its bundle's `orchestration`) and the
    /// Job's and pod's, so `kubectl get -l` and `cofferdam jobs --label` select alike.
    pub labels: BTreeMap<String, String>,
    /// The container's variables beside cofferdam's own, each passed into the run by name.
    pub env: Vec<PodEnv>,
}

/// A variable the pod's container defines for the run (`k8s job --env`). The run is given
/// its name only (`--env NAME`), so a value is never part of the container's command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodEnv {
    /// `--env NAME=VALUE`: the value is written into the manifest.
    Value { name: String, value: String },
    /// `--env NAME`: read from the key NAME of the Secret [`env_secret`] names, which the
    /// user creates in the cluster (a host's value does not travel into a manifest).
    FromSecret { name: String },
}

impl PodEnv {
    /// The variable's name.
    pub fn name(&self) -> &str {
        match self {
            PodEnv::Value { name, .. } | PodEnv::FromSecret { name } => name,
        }
    }
}

/// The Secret a Job's `--env NAME` variables are read from: `<job name>-env`.
pub fn env_secret(job_name: &str) -> String {
    format!("{job_name}-env")
}

/// The variables the manifest sets itself, which `--env` may not name.
pub const POD_ENV_RESERVED: &[&str] = &["COFFERDAM_HOME", "HOME"];

/// The label a Job carries whatever its task's: who made it.
const MANAGED_BY: &str = "app.kubernetes.io/managed-by";

/// Why `key=value` is not a Kubernetes label (a name of at most 63 letters, digits, `-`,
/// `_`, `.` between alphanumerics, after an optional DNS-subdomain prefix and `/`; a value
/// empty or of the name's form), or `None` when it is one. The API server refuses the Job
/// otherwise, which the JSON Schema does not check.
pub fn label_problem(key: &str, value: &str) -> Option<String> {
    fn name_like(s: &str) -> bool {
        let b = s.as_bytes();
        b.len() <= 63
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
            && b.first().is_none_or(u8::is_ascii_alphanumeric)
            && b.last().is_none_or(u8::is_ascii_alphanumeric)
    }
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        let ok = !p.is_empty() && p.len() <= 253 && p.split('.').all(valid_name);
        if !ok {
            return Some(format!(
                "the key's prefix `{p}` is not a DNS subdomain (lowercase labels joined by `.`)"
            ));
        }
    }
    if name.is_empty() || !name_like(name) {
        return Some(
            "the key's name is 1 to 63 letters, digits, `-`, `_` or `.`, starting and ending \
             with a letter or digit"
                .into(),
        );
    }
    if key == MANAGED_BY {
        return Some(format!("`{MANAGED_BY}` is set by cofferdam"));
    }
    if !name_like(value) {
        return Some(
            "the value is at most 63 letters, digits, `-`, `_` or `.`, starting and ending \
             with a letter or digit"
                .into(),
        );
    }
    None
}

/// Whether `name` is a DNS-1123 label a Job may be named (at most 63 characters).
pub fn valid_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// `word` quoted for `sh -c`.
fn quoted(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// The container's shell line: the run, its exit code kept, the export, that exit code.
pub fn container_script(spec: &JobSpec) -> String {
    let mut run = vec!["cofferdam", "--json", "run", "--no-tty", "--capture"]
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<_>>();
    if spec.scoped_only {
        run.push("--tier=scoped".into());
    }
    run.push("--workdir=/work".into());
    run.extend(spec.run_flags.iter().cloned());
    run.extend(spec.labels.iter().map(|(k, v)| format!("--label={k}={v}")));
    run.push("--".into());
    run.extend(spec.command.iter().cloned());
    let run: Vec<String> = run.iter().map(|w| quoted(w)).collect();
    format!(
        "{} > /export/run.json; rc=$?; cofferdam export last -o /export/job.tar.zst || rc=125; \
         exit $rc",
        run.join(" ")
    )
}

/// The `batch/v1` Job.
pub fn manifest(spec: &JobSpec) -> Value {
    let mut pod = json!({
        "restartPolicy": "Never",
        "containers": [{
            "name": "cofferdam",
            "image": spec.image,
            "workingDir": "/work",
            "command": ["sh", "-c", container_script(spec)],
            "env": [
                {"name": "COFFERDAM_HOME", "value": "/var/lib/cofferdam"},
                {"name": "HOME", "value": "/home/agent"}
            ],
            "securityContext": {
                "allowPrivilegeEscalation": false,
                "capabilities": {"drop": ["ALL"]},
                "seccompProfile": {"type": "Unconfined"},
                "appArmorProfile": {"type": "Unconfined"}
            },
            "volumeMounts": [
                {"name": "work", "mountPath": "/work"},
                {"name": "store", "mountPath": "/var/lib/cofferdam"},
                {"name": "export", "mountPath": "/export"}
            ]
        }],
        "volumes": [
            {"name": "work", "emptyDir": {}},
            {"name": "store", "emptyDir": {}},
            {"name": "export", "persistentVolumeClaim": {"claimName": format!("{}-export", spec.name)}}
        ]
    });
    if let Some(vars) = pod["containers"][0]["env"].as_array_mut() {
        let secret = env_secret(&spec.name);
        vars.extend(spec.env.iter().map(|e| match e {
            PodEnv::Value { name, value } => json!({"name": name, "value": value}),
            PodEnv::FromSecret { name } => json!({
                "name": name,
                "valueFrom": {"secretKeyRef": {"name": secret, "key": name}}
            }),
        }));
    }
    if !spec.scoped_only {
        pod["hostUsers"] = json!(false);
    }
    let mut labels = spec.labels.clone();
    labels.insert(MANAGED_BY.into(), "cofferdam".into());
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": spec.name, "labels": labels},
        "spec": {
            "backoffLimit": 0,
            "template": {"metadata": {"labels": labels}, "spec": pod}
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(scoped_only: bool) -> JobSpec {
        JobSpec {
            name: "fix-1".into(),
            image: "registry.example/agent:1".into(),
            run_flags: vec!["--timeout=30m".into()],
            command: vec!["sh".into(), "-c".into(), "echo it's".into()],
            scoped_only,
            labels: BTreeMap::from([("team".into(), "infra".into())]),
            env: vec![
                PodEnv::Value {
                    name: "MODE".into(),
                    value: "fast".into(),
                },
                PodEnv::FromSecret {
                    name: "TOKEN".into(),
                },
            ],
        }
    }

    #[test]
    fn env_values_are_in_the_container_and_names_come_from_the_jobs_secret() {
        let m = manifest(&spec(false));
        let vars = &m["spec"]["template"]["spec"]["containers"][0]["env"];
        assert_eq!(vars[2], json!({"name": "MODE", "value": "fast"}));
        assert_eq!(
            vars[3]["valueFrom"]["secretKeyRef"],
            json!({"name": "fix-1-env", "key": "TOKEN"})
        );
        // The run gets them by name (the caller's flags), never a value in its command.
        assert!(!container_script(&spec(false)).contains("fast"));
    }

    #[test]
    fn the_pod_has_a_user_namespace_or_runs_scoped() {
        let m = manifest(&spec(false));
        assert_eq!(m["spec"]["template"]["spec"]["hostUsers"], false);
        assert!(!container_script(&spec(false)).contains("--tier=scoped"));
        let m = manifest(&spec(true));
        assert!(m["spec"]["template"]["spec"].get("hostUsers").is_none());
        assert!(container_script(&spec(true)).contains("'--tier=scoped'"));
        let sc = &m["spec"]["template"]["spec"]["containers"][0]["securityContext"];
        assert_eq!(sc["seccompProfile"]["type"], "Unconfined");
        assert_eq!(sc["appArmorProfile"]["type"], "Unconfined");
    }

    #[test]
    fn the_script_quotes_every_word_and_keeps_the_run_exit_code() {
        let s = container_script(&spec(false));
        assert!(s.contains(r"'echo it'\''s'"), "{s}");
        assert!(
            s.contains("'--timeout=30m' '--label=team=infra' '--' 'sh'"),
            "{s}"
        );
        assert!(s.ends_with("exit $rc"), "{s}");
    }

    #[test]
    fn the_labels_go_to_the_run_the_job_and_the_pod() {
        let m = manifest(&spec(false));
        for at in [&m["metadata"], &m["spec"]["template"]["metadata"]] {
            assert_eq!(at["labels"]["team"], "infra");
            assert_eq!(at["labels"][MANAGED_BY], "cofferdam");
        }
        assert!(container_script(&spec(false)).contains("'--label=team=infra' '--'"));
    }

    #[test]
    fn kubernetes_labels_are_checked() {
        for (k, v) in [
            ("team", "infra"),
            ("a.b/c_d", "v1.2-x"),
            ("example.com/model", ""),
        ] {
            assert_eq!(label_problem(k, v), None, "{k}={v}");
        }
        let long = "a".repeat(64);
        for (k, v) in [
            ("", "x"),
            ("/x", "x"),
            ("Up.Case/x", "x"),
            ("a/", "x"),
            ("-a", "x"),
            (long.as_str(), "x"),
            ("k", long.as_str()),
            ("k", "a b"),
            ("k", "-a"),
            (MANAGED_BY, "me"),
        ] {
            assert!(label_problem(k, v).is_some(), "{k}={v}");
        }
    }

    #[test]
    fn job_names_are_dns_labels() {
        assert!(valid_name("fix-1"));
        for bad in ["", "-a", "a-", "A", "a_b", &"a".repeat(64)] {
            assert!(!valid_name(bad), "{bad}");
        }
    }
}
