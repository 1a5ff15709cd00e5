//! `cofferdam run -- COMMAND`: the arguments become a validated [`RunRequest`] (the
//! policy resolved and checked before anything is started), [`lifecycle::run`] runs it in
//! its order of effects, and the result is rendered (the ending's message, the summary or
//! `--json`). Every decision is a call into `cofferdam-policy`; every effect is the
//! lifecycle's.

use crate::cli::RunArgs;
use crate::context;
use crate::exit::Failure;
use crate::lifecycle::{self, Finished, RunRequest};
use cofferdam_policy::outcome::Ending;

/// Run the command; returns the exit code (the command's, or 125/126/127).
pub fn run(args: &RunArgs, json: bool) -> Result<u8, Failure> {
    if args.checkpoint.is_some() {
        return Err(Failure::usage(
            "--checkpoint picks the checkpoint of a parent: give the parent with `--on JOB`",
        ));
    }
    let req = request(args, json)?;
    let finished = lifecycle::run(&req)?;
    render(&finished, args.quiet, json)
}

/// The arguments as a request: the policy resolved (flags, user config, trusted manifest,
/// agent profile) and checked; usage errors exit 2 before anything exists.
pub(crate) fn request(args: &RunArgs, json: bool) -> Result<RunRequest, Failure> {
    request_with(args, json, |_| Ok(()))
}

/// [`request`], with `adjust` given the resolved policy before the checks (a run on
/// another job starts from that job's policy: `super::fork`).
pub(crate) fn request_with(
    args: &RunArgs,
    json: bool,
    adjust: impl FnOnce(&mut cofferdam_policy::Policy) -> Result<(), Failure>,
) -> Result<RunRequest, Failure> {
    if args.command.is_empty() {
        return Err(Failure::usage(
            "give the command to run after `--`, e.g. `cofferdam run -- bash`",
        ));
    }
    let env = context::env()?;
    let mut policy = context::policy(&args.policy, &env, &args.command)?;
    policy.orchestration =
        cofferdam_policy::orchestration::parse(&args.labels, args.task_id.as_deref())
            .map_err(Failure::usage)?;
    adjust(&mut policy)?;
    // The command as it runs: with the arguments an agent profile adds, recorded as such.
    let argv = match &policy.command_patch {
        Some(p) => p.apply(&args.command),
        None => args.command.clone(),
    };
    let skipped = super::preflight::skip_missing_optional(&mut policy);
    for warning in skipped
        .into_iter()
        .chain(policy.warnings.iter().cloned())
        .chain(super::preflight::check(&policy, args.stage.as_deref())?)
    {
        eprintln!("cofferdam: warning: {}", crate::shown_text(&warning));
    }
    let force_tty = match (args.tty, args.no_tty) {
        (true, _) => Some(true),
        (_, true) => Some(false),
        _ => None,
    };
    Ok(RunRequest {
        policy,
        env,
        argv,
        stage: args.stage.clone(),
        tier_cap: args.tier,
        force_tty,
        capture: args.capture,
        progress: crate::progress::wanted(json, args.quiet),
        fork: None,
    })
}

/// Tell how the run ended and where its job is; the exit code.
pub(crate) fn render(f: &Finished, quiet: bool, json: bool) -> Result<u8, Failure> {
    if let Ending::SetupFailed { error, .. } = &f.ending {
        eprintln!(
            "cofferdam: the sandbox could not be set up: {}",
            crate::shown_text(&error.to_string())
        );
    }
    if let Ending::ExecFailed { error, .. } = &f.ending {
        // Exit 127 on a PATH entry that is not lent was explained by the lifecycle, in
        // the record too (`profile_apply::unlent_path_entry`).
        eprintln!("cofferdam: {}", crate::shown_text(&error.to_string()));
    }
    let run_id = &f.run_id;
    let changes = f
        .bundle
        .filesystem
        .as_ref()
        .map_or(0, |fs| fs.changed_files);
    if json {
        crate::print_json(&serde_json::json!({
            "job": run_id, "exit_code": f.exit_code, "bundle": f.bundle_path,
            "changes": changes,
        }))?;
    } else if !quiet {
        match changes {
            0 => eprintln!("cofferdam: job {run_id}: no changes"),
            n => eprintln!(
                "cofferdam: job {run_id}: {n} staged change(s); review with `cofferdam status --review {run_id}`"
            ),
        }
    }
    Ok(u8::try_from(f.exit_code).unwrap_or(1))
}
