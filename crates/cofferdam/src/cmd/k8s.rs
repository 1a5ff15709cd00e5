//! `cofferdam k8s job [policy flags] [--image IMG] [--name N] [--label K=V] -- CMD`: prints the
//! Kubernetes Job manifest (`crate::k8s`) that runs CMD under cofferdam in a pod, from the
//! same policy flags as `run` (checked here by resolving them as a run would). `--env
//! NAME=VALUE` becomes a variable of the container and `--env NAME` one read from the Job's
//! Secret; the run inside is given the names only.

use crate::cli::K8sJobArgs;
use crate::context;
use crate::exit::{Failure, OK};

/// `cofferdam k8s job`.
pub fn job(a: &K8sJobArgs) -> Result<u8, Failure> {
    if a.command.is_empty() {
        return Err(Failure::usage(
            "give the command after `--`, e.g. `cofferdam k8s job -- make test`",
        ));
    }
    if !crate::k8s::valid_name(&a.name) {
        return Err(Failure::usage(format!(
            "--name {}: a Job name is 1 to 63 lowercase letters, digits or `-`, not starting \
             or ending with `-`",
            crate::shown_text(&a.name)
        )));
    }
    if a.policy.workdir.is_some() || !a.policy.publish.is_empty() {
        return Err(Failure::usage(
            "--workdir and --publish do not apply to a pod: its workdir is /work",
        ));
    }
    // The values are the policy crate's to check, as for `run`.
    let env = context::env()?;
    context::policy(&a.policy, &env, &a.command)?;
    let labels = cofferdam_policy::orchestration::parse(&a.labels, None)
        .map_err(Failure::usage)?
        .labels;
    for (k, v) in &labels {
        if let Some(why) = crate::k8s::label_problem(k, v) {
            return Err(Failure::usage(format!(
                "--label {}: not a Kubernetes label: {why}",
                crate::shown_text(&format!("{k}={v}"))
            )));
        }
    }
    // Each variable is defined by the container and passed into the run by name, so a value
    // is not part of the pod's command (the run's own records keep names only).
    let mut pod_env: Vec<crate::k8s::PodEnv> = Vec::new();
    for e in &a.policy.env {
        let var = match e.split_once('=') {
            Some((name, value)) => crate::k8s::PodEnv::Value {
                name: name.to_owned(),
                value: value.to_owned(),
            },
            None => crate::k8s::PodEnv::FromSecret { name: e.clone() },
        };
        if crate::k8s::POD_ENV_RESERVED.contains(&var.name()) {
            return Err(Failure::usage(format!(
                "--env {}: the pod's manifest sets {} itself; choose another name",
                var.name(),
                var.name()
            )));
        }
        pod_env.retain(|p| p.name() != var.name());
        pod_env.push(var);
    }
    let mut run_policy = a.policy.clone();
    run_policy.env = pod_env.iter().map(|e| e.name().to_owned()).collect();
    let secret_names: Vec<&str> = pod_env
        .iter()
        .filter(|e| matches!(e, crate::k8s::PodEnv::FromSecret { .. }))
        .map(|e| e.name())
        .collect();
    if !secret_names.is_empty() {
        let secret = crate::k8s::env_secret(&a.name);
        let literals: Vec<String> = secret_names
            .iter()
            .map(|n| format!("--from-literal={n}=..."))
            .collect();
        eprintln!(
            "cofferdam: note: {} come(s) from the Secret `{secret}` (one key per name); create \
             it before the Job: kubectl create secret generic {secret} {}",
            secret_names.join(", "),
            literals.join(" ")
        );
    }
    let spec = crate::k8s::JobSpec {
        name: a.name.clone(),
        image: a.image.clone(),
        run_flags: crate::batch::spec::run_flags(&run_policy, None),
        command: a.command.clone(),
        scoped_only: a.no_user_namespaces,
        labels,
        env: pod_env,
    };
    crate::print_json(&crate::k8s::manifest(&spec))?;
    Ok(OK)
}
