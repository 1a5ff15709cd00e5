//! `cofferdam k8s job [policy flags] [--image IMG] [--name N] [--label K=V] -- CMD`: prints the
//! Kubernetes Job manifest (`crate::k8s`) that runs CMD under cofferdam in a pod, from the
//! same policy flags as `run` (checked here by resolving them as a run would).

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
    let spec = crate::k8s::JobSpec {
        name: a.name.clone(),
        image: a.image.clone(),
        run_flags: crate::batch::spec::run_flags(&a.policy, None),
        command: a.command.clone(),
        scoped_only: a.no_user_namespaces,
        labels,
    };
    crate::print_json(&crate::k8s::manifest(&spec))?;
    Ok(OK)
}
