//! The semantic checks of a typed bundle: its rows against its tier's table, its summary
//! and safety booleans against what the writer's own functions derive from the rows, and its
//! internal consistency.
//!
//! Owns `check_internal`, `check_rows`, `check_derived` and `check_complete`, called in that
//! order by `check_bundle`. Each error names the JSON path of the claim that is wrong. It may not
//! touch the host: everything it compares is in the bundle.

use super::BundleError;
use crate::bundle::{
    ControlDimension, ControlStatus, FailureKind, RunBundle, RunState, SafetySummary, missing_rows,
    summarize_for_tier, tier_controls,
};
use crate::bundle::{ControlObservation, RequiredControl, Requirement, RunFailure, TierControls};
use crate::bundle::{DENIALS_MAX, RULES_MAX};

fn inconsistent(path: impl Into<String>, message: impl Into<String>) -> BundleError {
    BundleError::Inconsistent {
        path: path.into(),
        message: message.into(),
    }
}

/// Whether the network was confined: `network.policy.mode` is anything but `host` (an
/// unknown or missing mode counts as confined, which asks for more rows, not fewer).
fn network_confined(bundle: &RunBundle) -> bool {
    bundle.network.policy.get("mode").and_then(|m| m.as_str()) != Some("host")
}

/// Whether the run reached its command and the supervisor heard how it ended, so that every
/// control of the tier was installed and reported: the run completed, or its command exited
/// non-zero. A setup failure stops before the rest is installed; a timeout, an OOM kill, a
/// limit, a signal death (an interrupted supervisor's recovered bundle among them) and a
/// cancellation may come at any point, during setup too (`--timeout 1ms` does).
fn command_ran(bundle: &RunBundle) -> bool {
    match bundle.run.failure.as_ref().map(|f| f.kind) {
        None => bundle.run.state == RunState::Completed,
        Some(kind) => kind == FailureKind::ProcessExit,
    }
}

/// The table's row for the observation `c` (`None`: the row is not one the table requires).
fn required_row<'t>(
    table: &'t TierControls,
    confined: bool,
    c: &ControlObservation,
) -> Option<&'t RequiredControl> {
    table
        .applicable(confined)
        .find(|r| r.matches(c.mechanism, c.dimension, c.detail_control()))
}

/// How `table` depends on the row `c` (`None`: the row is not one the table requires).
fn requirement_of(
    table: &TierControls,
    confined: bool,
    c: &ControlObservation,
) -> Option<Requirement> {
    required_row(table, confined, c).map(|r| r.requirement)
}

/// Each row against the tier's table: no row of a mechanism the tier cannot install says
/// more than `unavailable`, and every row the table has as `absent` says `unavailable`.
pub(super) fn check_rows(bundle: &RunBundle) -> Result<(), BundleError> {
    let o = &bundle.executor_observations;
    let table = tier_controls(o.tier);
    let confined = network_confined(bundle);
    for (i, c) in o.controls.iter().enumerate() {
        let absent = requirement_of(table, confined, c) == Some(Requirement::Absent);
        if (absent || !table.installs(c.mechanism)) && c.status != ControlStatus::Unavailable {
            return Err(inconsistent(
                format!("executor_observations.controls[{i}].status"),
                format!(
                    "says `{}` for {} ({}), which the `{}` tier does not install: the row can \
                     only say `unavailable`",
                    c.status, c.mechanism, c.dimension, o.tier
                ),
            ));
        }
    }
    Ok(())
}

/// When the command ran, the rows are complete: every row the tier's table has is present
/// (the conditional ones when the network was confined), and no `hard` one is `failed`,
/// `unavailable` or `unknown`, nor `partial` where the table takes only `enforced` (the run
/// would have been refused).
pub(super) fn check_complete(bundle: &RunBundle) -> Result<(), BundleError> {
    if !command_ran(bundle) {
        return Ok(());
    }
    let o = &bundle.executor_observations;
    let table = tier_controls(o.tier);
    let confined = network_confined(bundle);
    for (i, c) in o.controls.iter().enumerate() {
        let Some(row) = required_row(table, confined, c) else {
            continue;
        };
        // A strict row refuses a `partial` reading as the init does (the plan's
        // `partial_refuses`), so a completed run cannot carry one.
        let refused = match c.status {
            ControlStatus::Failed | ControlStatus::Unavailable | ControlStatus::Unknown => true,
            ControlStatus::Partial => row.partial_refuses,
            ControlStatus::Enforced => false,
        };
        if row.requirement == Requirement::Hard && refused {
            return Err(inconsistent(
                format!("executor_observations.controls[{i}].status"),
                format!(
                    "{} ({}) is `{}`, but the `{}` tier does not hold without it and the run \
                     went on to its command instead of being refused",
                    c.mechanism, c.dimension, c.status, o.tier
                ),
            ));
        }
    }
    if let Some(r) = missing_rows(o.tier, &o.controls, confined).first() {
        let which = r
            .control
            .map_or(String::new(), |c| format!(" (details.control `{c}`)"));
        return Err(inconsistent(
            "executor_observations.controls",
            format!(
                "has no row for {} ({}){which}, which the `{}` tier always reports; a run that \
                 reached its command reports every control of its tier",
                r.mechanism, r.dimension, o.tier
            ),
        ));
    }
    Ok(())
}

/// The summary and the safety booleans against what the writer's functions
/// ([`summarize_for_tier`], [`SafetySummary::derive`]) compute from the rows: any
/// difference, stronger or weaker, is an error at the claim.
pub(super) fn check_derived(bundle: &RunBundle) -> Result<(), BundleError> {
    let o = &bundle.executor_observations;
    let derived = summarize_for_tier(o.tier, &o.controls);
    for dimension in ControlDimension::ALL {
        let stored = o.summary.get(&dimension);
        let expected = derived.get(&dimension);
        if stored != expected {
            let show =
                |s: Option<&ControlStatus>| s.map_or("nothing".to_owned(), |s| format!("`{s}`"));
            let missing: Vec<String> = missing_rows(o.tier, &o.controls, true)
                .into_iter()
                .filter(|r| r.dimension == dimension)
                .map(|r| r.mechanism.to_string())
                .collect();
            let why = if missing.is_empty() {
                String::new()
            } else {
                format!(
                    " (no row for {}, which the tier always reports)",
                    missing.join(", ")
                )
            };
            return Err(inconsistent(
                format!("executor_observations.summary.{dimension}"),
                format!(
                    "says {} but the controls for {dimension} on the `{}` tier combine to {}{why}",
                    show(stored),
                    o.tier,
                    show(expected)
                ),
            ));
        }
    }
    let expected = bundle.derived_safety();
    for (field, stored, derived) in safety_booleans(&bundle.safety, &expected) {
        if stored != derived {
            let from = match field {
                "safe_profile_requested" => "executor_plan.declared_floor",
                "filesystem_changes_staged" => "filesystem.state and its changes",
                _ => "executor_observations",
            };
            return Err(inconsistent(
                format!("safety.{field}"),
                format!("is `{stored}` but {from} give `{derived}`"),
            ));
        }
    }
    Ok(())
}

fn safety_booleans(
    stored: &SafetySummary,
    derived: &SafetySummary,
) -> [(&'static str, bool, bool); 7] {
    [
        (
            "safe_profile_requested",
            stored.safe_profile_requested,
            derived.safe_profile_requested,
        ),
        ("host_process", stored.host_process, derived.host_process),
        (
            "filesystem_changes_staged",
            stored.filesystem_changes_staged,
            derived.filesystem_changes_staged,
        ),
        (
            "filesystem_non_bypassable",
            stored.filesystem_non_bypassable,
            derived.filesystem_non_bypassable,
        ),
        (
            "filesystem_read_non_bypassable",
            stored.filesystem_read_non_bypassable,
            derived.filesystem_read_non_bypassable,
        ),
        (
            "filesystem_write_non_bypassable",
            stored.filesystem_write_non_bypassable,
            derived.filesystem_write_non_bypassable,
        ),
        (
            "network_non_bypassable",
            stored.network_non_bypassable,
            derived.network_non_bypassable,
        ),
    ]
}

/// Fields of the same bundle that must agree with each other.
pub(super) fn check_internal(bundle: &RunBundle) -> Result<(), BundleError> {
    check_run(bundle)?;
    let o = &bundle.executor_observations;
    if let Some(executor) = &bundle.run.executor
        && executor.tier != o.tier
    {
        return Err(inconsistent(
            "run.executor.tier",
            format!(
                "is `{}` but executor_observations.tier is `{}`",
                executor.tier, o.tier
            ),
        ));
    }
    if let Some(class) = o.executor.strip_prefix("cofferdam-")
        && class != o.tier.class().wire_name()
    {
        return Err(inconsistent(
            "executor_observations.executor",
            format!(
                "is `{}` but its tier `{}` is cofferdam-{}'s",
                o.executor,
                o.tier,
                o.tier.class()
            ),
        ));
    }
    if let Some(plan) = &bundle.executor_plan {
        if plan.requested_class != plan.requested_tier.class() {
            return Err(inconsistent(
                "executor_plan.requested_class",
                format!(
                    "is `{}` but the requested tier `{}` backs `{}`",
                    plan.requested_class,
                    plan.requested_tier,
                    plan.requested_tier.class()
                ),
            ));
        }
        if plan.floor_met != (plan.requested_class >= plan.declared_floor) {
            return Err(inconsistent(
                "executor_plan.floor_met",
                format!(
                    "is `{}` but `{}` against the floor `{}` gives `{}`",
                    plan.floor_met, plan.requested_class, plan.declared_floor, !plan.floor_met
                ),
            ));
        }
    }
    if let Some(fs) = &bundle.filesystem
        && fs.changed_files != fs.changes.len()
    {
        return Err(inconsistent(
            "filesystem.changed_files",
            format!(
                "is {} but filesystem.changes lists {}",
                fs.changed_files,
                fs.changes.len()
            ),
        ));
    }
    check_lineage(bundle)?;
    check_observations(bundle)?;
    check_agentctl(bundle)?;
    check_details(bundle)
}

/// The longest argument an `agentctl` request may carry (a request line is at most 4 KiB;
/// the vocabulary of `request` is the schema's, checked before this).
const AGENTCTL_ARGUMENT_MAX: usize = 4096;

/// `agentctl`: each request is by a listed client, with an argument
/// a request line can carry; the counters count at least what is listed.
fn check_agentctl(bundle: &RunBundle) -> Result<(), BundleError> {
    let a = &bundle.agentctl;
    if !a.requests.is_empty() && a.protocol.is_none() {
        return Err(inconsistent(
            "agentctl.protocol",
            "is absent but requests are listed",
        ));
    }
    for (i, r) in a.requests.iter().enumerate() {
        let path = |f: &str| format!("agentctl.requests[{i}].{f}");
        if !a.clients.iter().any(|c| c.name == r.client) {
            return Err(inconsistent(
                path("client"),
                format!("`{}` is not listed in agentctl.clients", r.client),
            ));
        }
        if r.argument
            .as_ref()
            .is_some_and(|t| t.len() > AGENTCTL_ARGUMENT_MAX)
        {
            return Err(inconsistent(
                path("argument"),
                format!("is longer than the {AGENTCTL_ARGUMENT_MAX} bytes a request carries"),
            ));
        }
    }
    if let Some(c) = &a.counters
        && c.requests_accepted < a.requests.len() as u64
    {
        return Err(inconsistent(
            "agentctl.counters.requests_accepted",
            format!(
                "is {} but {} request(s) are listed",
                c.requests_accepted,
                a.requests.len()
            ),
        ));
    }
    Ok(())
}

/// `run.parent_run_id` and `lineage.parent_run_id` name the same run when both are there.
fn check_lineage(bundle: &RunBundle) -> Result<(), BundleError> {
    if let (Some(run), Some(lineage)) = (&bundle.run.parent_run_id, &bundle.lineage)
        && *run != lineage.parent_run_id
    {
        return Err(inconsistent(
            "run.parent_run_id",
            format!(
                "is `{run}` but lineage.parent_run_id is `{}`",
                lineage.parent_run_id
            ),
        ));
    }
    Ok(())
}

/// Each `run_observation` dimension counts at least what it lists, within the bounds.
fn check_observations(bundle: &RunBundle) -> Result<(), BundleError> {
    let Some(obs) = &bundle.run_observation else {
        return Ok(());
    };
    for (name, dim) in [("filesystem", &obs.filesystem), ("network", &obs.network)] {
        if let Some(d) = dim {
            check_dimension(name, d)?;
        }
    }
    Ok(())
}

/// One `run_observation` dimension (`name`): what [`check_observations`] asks of each.
pub(super) fn check_dimension(
    name: &str,
    d: &crate::bundle::AccessObservation,
) -> Result<(), BundleError> {
    let path = |field: &str| format!("run_observation.{name}.{field}");
    if d.denials.len() > DENIALS_MAX {
        return Err(inconsistent(
            path("denials"),
            format!(
                "lists {} denials, more than the {DENIALS_MAX} a bundle holds",
                d.denials.len()
            ),
        ));
    }
    if d.rules.len() > RULES_MAX {
        return Err(inconsistent(
            path("rules"),
            format!(
                "lists {} rules, more than the {RULES_MAX} a bundle holds",
                d.rules.len()
            ),
        ));
    }
    let listed = d.denials.len() as u64 + d.denials_omitted.unwrap_or(0);
    if listed > 0 && d.denied.is_none_or(|n| n < listed) {
        return Err(inconsistent(
            path("denied"),
            format!(
                "is {} but {listed} denial(s) are listed or counted as omitted",
                d.denied.map_or("null".to_owned(), |n| n.to_string())
            ),
        ));
    }
    let by_rules = |f: fn(&crate::bundle::RuleCounter) -> u64| {
        d.rules.iter().map(f).fold(0u64, u64::saturating_add)
    };
    for (field, total, sum) in [
        ("allowed", d.allowed, by_rules(|r| r.allowed)),
        ("denied", d.denied, by_rules(|r| r.denied)),
    ] {
        if sum > 0 && total.is_none_or(|n| n < sum) {
            return Err(inconsistent(
                path(field),
                format!(
                    "is {} but the rules count {sum}",
                    total.map_or("null".to_owned(), |n| n.to_string())
                ),
            ));
        }
    }
    for (i, r) in d.rules.iter().enumerate() {
        if d.rules[..i].iter().any(|o| o.rule == r.rule) {
            return Err(inconsistent(
                format!("run_observation.{name}.rules[{i}].rule"),
                format!("`{}` is listed twice", r.rule),
            ));
        }
    }
    check_paths(name, d)?;
    Ok(())
}

/// `paths` (the filesystem dimension's only): within [`PATHS_MAX`], each target once, each
/// access a known word, once, in order; `allowed` counts at least the accesses listed.
fn check_paths(name: &str, d: &crate::bundle::AccessObservation) -> Result<(), BundleError> {
    use crate::bundle::{PATH_ACCESS_WORDS, PATHS_MAX};
    if d.paths.is_empty() && d.paths_omitted.is_none() {
        return Ok(());
    }
    let path = |field: &str| format!("run_observation.{name}.{field}");
    if name != "filesystem" {
        return Err(inconsistent(
            path("paths"),
            "only the filesystem dimension lists paths".to_owned(),
        ));
    }
    if d.paths.len() > PATHS_MAX {
        return Err(inconsistent(
            path("paths"),
            format!(
                "lists {} paths, more than the {PATHS_MAX} a bundle holds",
                d.paths.len()
            ),
        ));
    }
    let mut listed = 0u64;
    for (i, p) in d.paths.iter().enumerate() {
        let at = |field: &str| format!("run_observation.{name}.paths[{i}].{field}");
        if d.paths[..i].iter().any(|o| o.target == p.target) {
            return Err(inconsistent(
                at("target"),
                format!("`{}` is listed twice", p.target),
            ));
        }
        let ranks: Option<Vec<usize>> = p
            .access
            .iter()
            .map(|a| PATH_ACCESS_WORDS.iter().position(|w| w == a))
            .collect();
        match ranks {
            Some(r) if !r.is_empty() && r.windows(2).all(|w| w[0] < w[1]) => {}
            _ => {
                return Err(inconsistent(
                    at("access"),
                    format!(
                        "must list some of {PATH_ACCESS_WORDS:?}, each once and in that order, \
                         not {:?}",
                        p.access
                    ),
                ));
            }
        }
        listed += p.access.len() as u64;
    }
    if listed > 0 && d.allowed.is_some_and(|n| n < listed) {
        return Err(inconsistent(
            path("allowed"),
            format!(
                "is {} but the paths list {listed} access(es)",
                d.allowed.unwrap_or(0)
            ),
        ));
    }
    Ok(())
}

fn check_run(bundle: &RunBundle) -> Result<(), BundleError> {
    let run = &bundle.run;
    if run.finished_at_unix_ms < run.started_at_unix_ms {
        return Err(inconsistent(
            "run.finished_at_unix_ms",
            format!(
                "{} is before run.started_at_unix_ms {}",
                run.finished_at_unix_ms, run.started_at_unix_ms
            ),
        ));
    }
    let kind = run.failure.as_ref().map(|f: &RunFailure| f.kind);
    let fits = match run.state {
        RunState::Completed => kind.is_none(),
        RunState::Failed => kind.is_some_and(|k| k != FailureKind::Cancelled),
        RunState::Cancelled => kind == Some(FailureKind::Cancelled),
    };
    if !fits {
        let failure = kind.map_or("no run.failure".to_owned(), |k| {
            format!("run.failure.kind `{}`", failure_word(k))
        });
        let state = match run.state {
            RunState::Completed => "completed",
            RunState::Failed => "failed",
            RunState::Cancelled => "cancelled",
        };
        return Err(inconsistent(
            "run.state",
            format!(
                "is `{state}` with {failure}: completed has no failure, failed has one that is \
                 not `cancelled`, cancelled has `cancelled`"
            ),
        ));
    }
    if run.state == RunState::Completed && run.exit_code.is_some_and(|c| c != 0) {
        return Err(inconsistent(
            "run.exit_code",
            format!(
                "is {} but run.state is `completed` (exit status 0)",
                run.exit_code.unwrap_or_default()
            ),
        ));
    }
    Ok(())
}

fn failure_word(kind: FailureKind) -> &'static str {
    match kind {
        FailureKind::ProcessExit => "process_exit",
        FailureKind::Signal => "signal",
        FailureKind::Timeout => "timeout",
        FailureKind::Oom => "oom",
        FailureKind::Limit => "limit",
        FailureKind::Cancelled => "cancelled",
        FailureKind::Setup => "setup",
    }
}

/// The detail flags that record a row's read-back: `true` read and as planned, `false`
/// read otherwise, `null` not read (the row is then `unknown`).
const READ_BACK_FLAGS: [&str; 4] = [
    "verified",
    "read_back",
    "read_only_read_back",
    "size_read_back",
];

/// Details that contradict an `enforced` status: a read-back flag that says the effect was
/// not read back as planned (`false`) or not read at all (`null`), or a Landlock
/// restriction that is not `fully_enforced`.
fn check_details(bundle: &RunBundle) -> Result<(), BundleError> {
    for (i, c) in bundle.executor_observations.controls.iter().enumerate() {
        if c.status != ControlStatus::Enforced {
            continue;
        }
        for flag in READ_BACK_FLAGS {
            let said = match c.details.get(flag) {
                Some(serde_json::Value::Bool(false)) => "false",
                Some(serde_json::Value::Null) => "null",
                _ => continue,
            };
            return Err(inconsistent(
                format!("executor_observations.controls[{i}].details.{flag}"),
                format!(
                    "is {said}, so {} ({}) was not read back, but its status is `enforced`",
                    c.mechanism, c.dimension
                ),
            ));
        }
        if let Some(restriction) = c.details.get("restriction").and_then(|v| v.as_str())
            && restriction != "fully_enforced"
        {
            return Err(inconsistent(
                format!("executor_observations.controls[{i}].details.restriction"),
                format!(
                    "is `{restriction}` but the status of {} ({}) is `enforced`",
                    c.mechanism, c.dimension
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_words_are_the_wire_names() {
        for kind in [
            FailureKind::ProcessExit,
            FailureKind::Signal,
            FailureKind::Timeout,
            FailureKind::Oom,
            FailureKind::Limit,
            FailureKind::Cancelled,
            FailureKind::Setup,
        ] {
            assert_eq!(
                serde_json::to_string(&kind).unwrap(),
                format!("\"{}\"", failure_word(kind))
            );
        }
    }
}
