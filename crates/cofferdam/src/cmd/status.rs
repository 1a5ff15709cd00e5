//! `cofferdam status [JOB] [--review]` and `cofferdam jobs`: read the job store and the Run
//! Bundle, render them. Nothing here changes a job.

use crate::cli::StatusArgs;
use crate::cmd::jobrules::job_failure;
use crate::context;
use crate::exit::{Failure, OK};
use crate::style::Style;
use cofferdam_record::bundle::{
    AccessObservation, ChangeKind, ControlDimension, ControlStatus, RunBundle, RunLineage,
};
use cofferdam_record::read_bundle;
use cofferdam_record::shown::escape;
use cofferdam_stage::apply;
use cofferdam_stage::gitsummary::GitSummary;
use cofferdam_stage::job::{Job, JobState, JobStore, JobSummary, StageState};
use cofferdam_stage::ledger::Ledger;
use cofferdam_stage::review::{self, Stage, refresh_filesystem};
use serde_json::json;
use std::fmt::Write as _;

/// The bundle, in its own field order, followed by `review_context`.
#[derive(serde::Serialize)]
struct Review<'a> {
    #[serde(flatten)]
    bundle: &'a RunBundle,
    review_context: serde_json::Value,
    /// The job's review comments (`crate::cmd::comment`); omitted when there are none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    review_comments: Vec<cofferdam_stage::comments::Comment>,
    /// What cooperating agents noted (`cofferdam ctl note`), always present.
    agent_notes: Vec<crate::cmd::notes::AgentNote>,
}

/// The job's state, with an `active` job whose supervisor is gone shown as `interrupted`.
fn effective_state(job: &Job, state: &JobState) -> StageState {
    if state.state == StageState::Active && job.is_locked().ok() == Some(false) {
        StageState::Interrupted
    } else {
        state.state
    }
}

fn state_word(s: StageState) -> &'static str {
    match s {
        StageState::Active => "active",
        StageState::Staged => "staged",
        StageState::Applied => "applied",
        StageState::Discarded => "discarded",
        StageState::Interrupted => "interrupted",
    }
}

fn load_bundle(job: &Job) -> Result<Option<RunBundle>, Failure> {
    match std::fs::read(job.bundle_path()) {
        Ok(bytes) => read_bundle(&bytes).map(Some).map_err(|e| {
            Failure::setup(format!(
                "{}: invalid Run Bundle: {e}",
                job.bundle_path().display()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Failure::setup(format!(
            "{}: {e}",
            job.bundle_path().display()
        ))),
    }
}

/// The JSON of `status [--review] --json`: the saved bundle with its filesystem view
/// refreshed from the job's state and apply ledger, followed by `review_context`, which
/// says what was refreshed, from which files, and what the saved bundle said. The saved
/// `run-bundle.json` is never rewritten: it stays the capture-time record.
fn print_review_json(
    job: &Job,
    state: &JobState,
    stage_state: StageState,
    bundle: Option<RunBundle>,
    stage_review: Option<&StageReview>,
) -> Result<(), Failure> {
    let mut context = json!({
        "job_dir": job.dir(),
        "job_state": state_word(stage_state),
        "workdir": state.workdir,
        "bundle_path": bundle.as_ref().map(|_| job.bundle_path()),
        "stage": stage_review.map(|r| json!({
            "applied": r.applied,
            "remaining": r.remaining,
            "dropped": r.dropped,
            "conflicts_now": r.conflicts.iter()
                .map(|(path, reason)| json!({"path": path, "reason": reason}))
                .collect::<Vec<_>>(),
            "sensitive": r.sensitive.iter()
                .map(|(path, reason)| json!({"path": path, "sensitive": reason}))
                .collect::<Vec<_>>(),
        })),
    });
    let Some(mut bundle) = bundle else {
        return crate::print_json(&json!({ "review_context": context, "agent_notes": [] }));
    };
    let review_comments = crate::cmd::comment::of_job(job);
    if let Some(c) = context.as_object_mut() {
        c.insert("lineage".into(), lineage_json(job, &bundle));
        c.insert("observations".into(), observations_json(&bundle));
    }
    if let Some(saved) = bundle.filesystem.as_ref() {
        let saved_view = json!({
            "path": job.bundle_path(),
            "describes": "the run at capture time; apply and drop never rewrite it",
            "filesystem_state": saved.state,
            "changed_files": saved.changed_files,
            "filesystem_changes_staged": bundle.safety.filesystem_changes_staged,
        });
        let view = match Ledger::load(&job.ledger_path()) {
            Ok(ledger) => {
                let fresh = refresh_filesystem(saved, &ledger, stage_state);
                bundle.filesystem = Some(fresh);
                // The record crate's own rule, so the view passes the strict reader.
                bundle.safety.filesystem_changes_staged =
                    bundle.derived_safety().filesystem_changes_staged;
                json!({
                    "filesystem": "refreshed",
                    "refreshed_at_unix_ms": crate::cmd::jobrules::now_ms(),
                    "sources": [job.state_path(), job.ledger_path()],
                    "refreshed_fields": REFRESHED_FIELDS,
                    "saved_bundle": saved_view,
                })
            }
            Err(e) => json!({
                "filesystem": "saved",
                "error": format!(
                    "cannot read the apply ledger, so this is the saved view, not today's: {e}"
                ),
                "saved_bundle": saved_view,
            }),
        };
        if let Some(c) = context.as_object_mut() {
            c.insert("filesystem_view".into(), view);
        }
    }
    crate::print_json(&Review {
        agent_notes: crate::cmd::notes::agent_notes(&bundle),
        bundle: &bundle,
        review_context: context,
        review_comments,
    })
}

/// The fields of the review JSON that describe the stage now rather than at capture time.
const REFRESHED_FIELDS: [&str; 6] = [
    "filesystem.state",
    "filesystem.changed_files",
    "filesystem.whiteouts",
    "filesystem.sample_paths",
    "filesystem.changes",
    "safety.filesystem_changes_staged",
];

// Lineage and run observations in the review (issue 21): this block, called from
// `print_review_json` (`review_context.lineage`, `review_context.observations`), `status`
// (the lineage lines) and `render_bundle` (the observations section).

/// What the store says now of a fork's parent: its stage's state and whether the
/// checkpoint the fork started from is still kept (`None`: the parent's records are gone).
fn parent_now(job: &Job, l: &RunLineage) -> (Option<&'static str>, Option<bool>) {
    let id = &l.parent_run_id;
    let plain = !id.is_empty() && !id.contains('/') && id != "." && id != "..";
    let Some(parent) = job
        .dir()
        .parent()
        .filter(|_| plain)
        .and_then(|jobs| Job::open(&jobs.join(id)).ok())
    else {
        return (None, None);
    };
    let state = parent
        .state()
        .ok()
        .map(|st| state_word(effective_state(&parent, &st)));
    let kept = cofferdam_stage::checkpoint::list(&parent)
        .ok()
        .map(|all| all.iter().any(|c| c.manifest.id == l.checkpoint_id));
    (state, kept)
}

/// `review_context.lineage`: `null` for a run that is no fork.
fn lineage_json(job: &Job, b: &RunBundle) -> serde_json::Value {
    let Some(l) = &b.lineage else {
        return serde_json::Value::Null;
    };
    let (state, kept) = parent_now(job, l);
    json!({
        "parent_run_id": l.parent_run_id,
        "checkpoint_id": l.checkpoint_id,
        "parent_state": state,
        "checkpoint_kept": kept,
    })
}

/// One dimension of `review_context.observations`; counters stay `null` where the
/// mechanism could not count.
fn observation_json(a: Option<&AccessObservation>) -> serde_json::Value {
    let Some(a) = a else {
        return json!({ "observed": false, "allowed": null, "denied": null });
    };
    json!({
        "observed": true,
        "allowed": a.allowed,
        "denied": a.denied,
        "denials_listed": a.denials.len(),
        "denials_omitted": a.denials_omitted,
        "rules": a.rules.iter()
            .map(|r| json!({ "rule": r.rule, "allowed": r.allowed, "denied": r.denied }))
            .collect::<Vec<_>>(),
        "rules_omitted": a.rules_omitted,
        "paths_listed": a.paths.len(),
        "paths_omitted": a.paths_omitted,
    })
}

/// `review_context.observations`: what mechanisms observed the run access, per dimension.
fn observations_json(b: &RunBundle) -> serde_json::Value {
    let o = b.run_observation.as_ref();
    json!({
        "recorded": o.is_some(),
        "network": observation_json(o.and_then(|o| o.network.as_ref())),
        "filesystem": observation_json(o.and_then(|o| o.filesystem.as_ref())),
    })
}

/// The review's lineage lines, for a fork.
fn render_lineage(o: &mut String, job: &Job, b: &RunBundle) {
    let Some(l) = &b.lineage else {
        return;
    };
    let (state, kept) = parent_now(job, l);
    let state = state.map_or_else(
        || "its records are gone".to_owned(),
        |w| format!("stage {w}"),
    );
    let kept = match kept {
        Some(true) => "kept",
        Some(false) => "deleted since",
        None => "unknown",
    };
    let _ = writeln!(o, "  parent    {} ({state})", escape(&l.parent_run_id));
    let _ = writeln!(
        o,
        "  from      checkpoint {} ({kept})",
        escape(&l.checkpoint_id)
    );
}

/// How many rules and denials the text review lists per dimension.
const OBSERVED_SHOWN: usize = 5;

/// The review's observations section: per dimension the allowed and denied counts
/// (`unknown` for a counter the mechanism could not keep, never 0), the busiest rules and
/// the first denials.
fn render_observations(o: &mut String, b: &RunBundle, s: Style) {
    let _ = writeln!(o, "\n{}", s.heading("Observations"));
    let Some(ro) = &b.run_observation else {
        let _ = writeln!(
            o,
            "  {}",
            s.dim("none recorded: no mechanism reported what this run accessed")
        );
        return;
    };
    let num = |v: Option<u64>| v.map_or_else(|| "unknown".to_owned(), |v| v.to_string());
    for (label, a) in [
        ("network", ro.network.as_ref()),
        ("filesystem", ro.filesystem.as_ref()),
    ] {
        let Some(a) = a else {
            let _ = writeln!(o, "  {label:<10} {}", s.dim("not observed"));
            continue;
        };
        let _ = writeln!(
            o,
            "  {label:<10} {} allowed, {} denied",
            num(a.allowed),
            num(a.denied)
        );
        for r in a.rules.iter().take(OBSERVED_SHOWN) {
            let _ = writeln!(
                o,
                "    rule {}: {} allowed, {} denied",
                escape(&r.rule),
                r.allowed,
                r.denied
            );
        }
        let more =
            a.rules.len().saturating_sub(OBSERVED_SHOWN) as u64 + a.rules_omitted.unwrap_or(0);
        if more > 0 {
            let _ = writeln!(o, "    {}", s.dim(&format!("and {more} more rule(s)")));
        }
        for d in a.denials.iter().take(OBSERVED_SHOWN) {
            let _ = writeln!(
                o,
                "    {} {} ({})",
                s.bad("denied"),
                escape(&d.target),
                escape(&d.access)
            );
        }
        let more =
            a.denials.len().saturating_sub(OBSERVED_SHOWN) as u64 + a.denials_omitted.unwrap_or(0);
        if more > 0 {
            let _ = writeln!(o, "    {}", s.dim(&format!("and {more} more denial(s)")));
        }
        for p in a.paths.iter().take(OBSERVED_SHOWN) {
            let _ = writeln!(o, "    {} ({})", escape(&p.target), p.access.join(", "));
        }
        let more =
            a.paths.len().saturating_sub(OBSERVED_SHOWN) as u64 + a.paths_omitted.unwrap_or(0);
        if more > 0 {
            let _ = writeln!(o, "    {}", s.dim(&format!("and {more} more path(s)")));
        }
        if a.allowed.is_none() && a.paths.len() >= cofferdam_record::bundle::PATHS_MAX {
            let _ = writeln!(
                o,
                "    {}",
                s.dim("and perhaps more paths: the counts are unknown")
            );
        }
    }
}

/// `cofferdam status`.
pub fn status(args: &StatusArgs, json: bool, s: Style) -> Result<u8, Failure> {
    let env = context::env()?;
    let store = JobStore::open(&env.storage_root).map_err(job_failure)?;
    let job = crate::cmd::jobref::resolve(&store, &args.job, &env.places.cwd)?;
    let mut state = job.state().map_err(job_failure)?;
    if args.review
        && effective_state(&job, &state) == StageState::Interrupted
        && let Ok(lock) = job.try_lock()
    {
        // `--review` seals an interrupted job on demand (`crate::cmd::recover`).
        state = crate::cmd::recover::settled_state(&job, &lock)?;
    }
    let stage_state = effective_state(&job, &state);
    let bundle = load_bundle(&job)?;
    let stage_review = if (args.review || json) && stage_state == StageState::Staged {
        review_stage(&job, &state.workdir)
    } else {
        None
    };
    if json {
        print_review_json(&job, &state, stage_state, bundle, stage_review.as_ref())?;
        return Ok(OK);
    }
    let mut o = String::new();
    if let Some(b) = bundle.as_ref().filter(|_| args.review) {
        advisory_banner(&mut o, b, s);
    }
    let _ = writeln!(
        o,
        "{} {}  {}",
        s.heading("job"),
        escape(job.id()),
        s.dim(&format!("stage {}", state_word(stage_state)))
    );
    let _ = writeln!(o, "  command   {}", shell_words(&state.command));
    let _ = writeln!(o, "  workdir   {}", crate::shown_path(&state.workdir));
    if let Some(b) = bundle.as_ref().filter(|_| args.review) {
        render_lineage(&mut o, &job, b);
    }
    match &bundle {
        None => {
            let _ = writeln!(
                o,
                "  {}",
                s.warn(match stage_state {
                    StageState::Interrupted => {
                        "interrupted: the supervisor ended before writing the Run Bundle; the stage is intact"
                    }
                    _ => "running: no Run Bundle yet",
                })
            );
        }
        Some(b) => {
            // Entries a rollup keeps listed: those that run code or conflict.
            let keep: Option<std::collections::HashSet<&str>> = (!args.all).then(|| {
                stage_review
                    .iter()
                    .flat_map(|r| r.sensitive.iter().chain(&r.conflicts))
                    .map(|(p, _)| p.as_str())
                    .collect()
            });
            let git = if args.review && stage_state == StageState::Staged {
                git_summaries(&job, &state.workdir)
            } else {
                Vec::new()
            };
            render_bundle(
                &mut o,
                b,
                job.id(),
                args.review,
                stage_state,
                keep.as_ref(),
                &git,
                s,
            )
        }
    }
    if let Some(r) = &stage_review {
        render_stage(&mut o, r, s);
    }
    if args.review {
        crate::cmd::comment::render(&mut o, &job, s);
    }
    crate::pager::show(o.as_bytes(), args.no_pager)?;
    Ok(OK)
}

/// The command as a shell would show it, one line; long or multi-line arguments are cut.
fn shell_words(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            let first = a.trim().lines().next().unwrap_or("");
            let a = if first.len() < a.len() || first.chars().count() > 60 {
                format!("{}…", first.chars().take(60).collect::<String>())
            } else {
                a.clone()
            };
            let a = escape(&a);
            if !a.is_empty()
                && a.bytes()
                    .all(|c| c.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&c))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// First in a review whose boundary did not hold in full: say so before anything else,
/// truly. Derived from the recorded controls and safety, not from the tier name: a run
/// whose observations were lost with its supervisor is "unknown" (not "ran as a host
/// process"), one with no boundary control enforced is "no boundary held", and one where
/// some held and some did not says which did not.
fn advisory_banner(o: &mut String, b: &RunBundle, s: Style) {
    let sf = &b.safety;
    let tier = b.executor_observations.tier.class();
    let boundary = [
        ControlDimension::FilesystemRead,
        ControlDimension::FilesystemWrite,
        ControlDimension::Network,
        ControlDimension::Process,
    ];
    let controls = &b.executor_observations.controls;
    let observed = controls.iter().any(|c| boundary.contains(&c.dimension));
    let enforced = controls
        .iter()
        .any(|c| boundary.contains(&c.dimension) && c.status == ControlStatus::Enforced);
    let headline =
        if !observed && b.executor_observations.tier != cofferdam_record::EnforcementTier::None {
            format!(
                "WARNING: what held in this run is unknown: its sandbox's observations were lost \
             before they were recorded ({tier} tier was set up); none is claimed, so review \
             its changes as those of an unconfined command"
            )
        } else if !enforced {
            format!(
                "WARNING: no boundary held in this run ({tier} tier){}; filesystem, network and \
             process isolation were not enforced",
                if sf.host_process {
                    ": the command ran as a host process"
                } else {
                    ""
                }
            )
        } else {
            let missing: Vec<&str> = [
                ("filesystem write", sf.filesystem_write_non_bypassable),
                ("filesystem read", sf.filesystem_read_non_bypassable),
                ("network", sf.network_non_bypassable),
                ("process isolation", !sf.host_process),
            ]
            .into_iter()
            .filter_map(|(name, held)| (!held).then_some(name))
            .collect();
            if missing.is_empty() {
                return;
            }
            format!(
                "NOTE: the boundary held in part in this run ({tier} tier): {} not fully enforced; \
             the Safety lines below say by what",
                missing.join(", ")
            )
        };
    let _ = writeln!(o, "{}\n", s.warn(&headline));
}

/// A duration for a person: `0.4 ms`-precision is not recorded, so under a millisecond is
/// `<1 ms`; then ms, seconds with one decimal, minutes and seconds, hours and minutes.
pub(crate) fn human_duration(ms: u64) -> String {
    match ms {
        0 => "<1 ms".to_owned(),
        1..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{}.{} s", ms / 1000, ms % 1000 / 100),
        60_000..3_600_000 => format!("{}m {:02}s", ms / 60_000, ms % 60_000 / 1000),
        _ => format!("{}h {:02}m", ms / 3_600_000, ms % 3_600_000 / 60_000),
    }
}

/// The ending of a run in a word or two: `completed`, `exit 3`, `oom`, `timeout`, ...
pub(crate) fn ending_word(b: &RunBundle) -> String {
    match &b.run.failure {
        None => "completed (exit 0)".to_owned(),
        Some(f) => match (f.kind, b.run.exit_code) {
            (cofferdam_record::bundle::FailureKind::ProcessExit, Some(c)) => format!("exit {c}"),
            (kind, _) => serde_json::to_value(kind)
                .ok()
                .and_then(|v| v.as_str().map(|w| w.replace('_', " ")))
                .unwrap_or_else(|| "failed".to_owned()),
        },
    }
}

/// `rollup`: roll up directories added whole and leave out the object files of each `git`
/// directory summarised, keeping the entries it names listed; `None` lists every entry
/// (`--all`). `job_id` is the local job's id, which the next steps name: an imported job's
/// bundle keeps the run id of the machine it ran on.
#[allow(clippy::too_many_arguments)]
fn render_bundle(
    o: &mut String,
    b: &RunBundle,
    job_id: &str,
    review: bool,
    state: StageState,
    rollup: Option<&std::collections::HashSet<&str>>,
    git: &[GitSummary],
    s: Style,
) {
    let r = &b.run;
    let took = human_duration(r.duration_ms);
    match &r.failure {
        None => {
            let _ = writeln!(o, "  run       {} in {took}", s.good(&ending_word(b)));
        }
        Some(f) => {
            let _ = writeln!(o, "  run       {} after {took}", s.bad(&ending_word(b)));
            let _ = writeln!(o, "  why       {}", escape(&f.message));
        }
    }
    let _ = writeln!(
        o,
        "  tier      {} ({})",
        b.executor_observations.tier.class(),
        b.executor_observations.tier
    );
    let changes = b.filesystem.as_ref().map_or(0, |f| f.changed_files);
    let _ = writeln!(o, "  changes   {changes}");
    if !review {
        return;
    }
    let _ = writeln!(o, "\n{}", s.heading("Safety"));
    let sf = &b.safety;
    for (label, value, dim) in [
        (
            "filesystem write",
            sf.filesystem_write_non_bypassable,
            Some(ControlDimension::FilesystemWrite),
        ),
        (
            "filesystem read",
            sf.filesystem_read_non_bypassable,
            Some(ControlDimension::FilesystemRead),
        ),
        (
            "network",
            sf.network_non_bypassable,
            Some(ControlDimension::Network),
        ),
        (
            "process isolation",
            !sf.host_process,
            Some(ControlDimension::Process),
        ),
        (
            "kernel surface",
            b.executor_observations
                .is_enforced(ControlDimension::KernelSurface),
            Some(ControlDimension::KernelSurface),
        ),
        ("changes staged", sf.filesystem_changes_staged, None),
    ] {
        let mark = if value { s.good("yes") } else { s.bad("no ") };
        let via = dim.map_or(String::new(), |d| {
            let mechs: Vec<String> = b
                .executor_observations
                .controls
                .iter()
                .filter(|c| c.dimension == d)
                .map(|c| match c.status {
                    ControlStatus::Enforced => c.mechanism.wire_name().to_owned(),
                    other => format!("{} ({})", c.mechanism.wire_name(), other.wire_name()),
                })
                .collect();
            if mechs.is_empty() {
                "no control observed".to_owned()
            } else {
                mechs.join(", ")
            }
        });
        let _ = writeln!(o, "  {label:<18} {mark}  {}", s.dim(&via));
    }
    crate::egress::render_review(o, b, s);
    render_observations(o, b, s);
    if let Some(fs) = &b.filesystem {
        let _ = writeln!(
            o,
            "\n{}",
            s.heading(&format!("Changes ({})", fs.changes.len()))
        );
        for kind in [
            ChangeKind::Added,
            ChangeKind::Modified,
            ChangeKind::Deleted,
            ChangeKind::TypeChanged,
            ChangeKind::Opaque,
        ] {
            let group: Vec<&cofferdam_record::bundle::ChangeEntry> =
                fs.changes.iter().filter(|c| c.kind == kind).collect();
            let rows = match rollup {
                Some(keep) => review::rollup(
                    &group
                        .iter()
                        .map(|c| review::RollupItem {
                            path: review::change_path_bytes(c),
                            kind: c.kind,
                            new_type: c.new_type,
                            size: c.size_bytes,
                            keep: keep.contains(c.path.as_str()),
                        })
                        .collect::<Vec<_>>(),
                ),
                None => (0..group.len()).map(review::RollupRow::One).collect(),
            };
            for row in rows {
                let (c, slash, note) = match row {
                    review::RollupRow::One(i)
                        if rollup.is_some_and(|keep| !keep.contains(group[i].path.as_str()))
                            && is_git_object(git, review::change_path_bytes(group[i])) =>
                    {
                        continue;
                    }
                    review::RollupRow::One(i) => (group[i], "", String::new()),
                    review::RollupRow::Dir {
                        index,
                        files,
                        dirs,
                        bytes,
                    } => (group[index], "/", rollup_note(files, dirs, bytes, s)),
                };
                let word = match kind {
                    ChangeKind::Added => s.good("added       "),
                    ChangeKind::Modified => s.warn("modified    "),
                    ChangeKind::Deleted => s.bad("deleted     "),
                    ChangeKind::TypeChanged => s.warn("type changed"),
                    ChangeKind::Opaque => s.warn("replaced    "),
                };
                let is_dir =
                    c.new_type == Some(cofferdam_record::bundle::ChangeEntryType::Directory);
                let mode = crate::cmd::jobrules::painted_mode(c.kind, c.mode, is_dir, s);
                let _ = writeln!(o, "  {word} {}{slash}{mode}{note}", escape(&c.path));
            }
        }
    }
    for g in git {
        render_git(o, g, rollup.is_some(), s);
    }
    crate::cmd::notes::render_review(o, b, s);
    let mut warnings: Vec<&String> = b.safety.warnings.iter().chain(&b.run.warnings).collect();
    // The supervisor's warnings are in both lists: show each once.
    let mut seen = std::collections::HashSet::new();
    warnings.retain(|w| seen.insert(*w));
    if !warnings.is_empty() {
        let _ = writeln!(o, "\n{}", s.heading("Warnings"));
        for w in warnings {
            let _ = writeln!(o, "  {} {}", s.warn("-"), escape(w));
        }
    }
    let id = escape(job_id);
    match state {
        StageState::Applied => {
            let _ = writeln!(
                o,
                "\napplied: every staged change of this job is in the workdir; nothing is left \
                 to apply"
            );
            return;
        }
        StageState::Discarded => {
            let _ = writeln!(
                o,
                "\ndropped: this job's stage is discarded; nothing is left to apply or drop"
            );
            return;
        }
        _ => {}
    }
    if b.filesystem.as_ref().is_some_and(|f| !f.changes.is_empty()) {
        let _ = writeln!(
            o,
            "\nnext: cofferdam diff {id}  ·  cofferdam apply {id}  ·  cofferdam drop {id}"
        );
    }
}

/// `cofferdam jobs`.
pub fn jobs(a: &crate::cli::JobsArgs, json: bool, s: Style) -> Result<u8, Failure> {
    let env = context::env()?;
    let store = JobStore::open(&env.storage_root).map_err(job_failure)?;
    let mut list = store.list().map_err(job_failure)?;
    let want_labels = a
        .labels
        .iter()
        .map(|l| cofferdam_policy::orchestration::parse_label(l).map_err(Failure::usage))
        .collect::<Result<Vec<_>, _>>()?;
    let by_orchestration = !want_labels.is_empty() || a.task_id.is_some();
    let filtered =
        a.workdir.is_some() || a.state.is_some() || a.limit.is_some() || by_orchestration;
    if let Some(want) = &a.state
        && ![
            StageState::Active,
            StageState::Staged,
            StageState::Applied,
            StageState::Discarded,
            StageState::Interrupted,
        ]
        .iter()
        .any(|st| state_word(*st) == want)
    {
        return Err(Failure::usage(format!(
            "--state {want}: not a job state; give one of active, staged, applied, discarded, \
             interrupted"
        )));
    }
    let under = match &a.workdir {
        None => None,
        Some(w) => Some(
            std::fs::canonicalize(env.places.cwd.join(w))
                .map_err(|e| Failure::usage(format!("--workdir {}: {e}", w.display())))?,
        ),
    };
    list.retain(|j| match j {
        JobSummary::Readable { job, state } => {
            under.as_ref().is_none_or(|u| state.workdir.starts_with(u))
                && a.state
                    .as_ref()
                    .is_none_or(|w| state_word(effective_state(job, state)) == w)
                && cofferdam_policy::orchestration::matches(
                    &state.labels,
                    state.task_id.as_deref(),
                    &want_labels,
                    a.task_id.as_deref(),
                )
        }
        // Unreadable jobs have no workdir, state or labels to match.
        JobSummary::Unreadable { .. } => under.is_none() && a.state.is_none() && !by_orchestration,
    });
    if let Some(n) = a.limit {
        list.truncate(n);
    }
    let sizes: Vec<u64> = list
        .iter()
        .map(|j| match j {
            JobSummary::Readable { job, .. } => disk_bytes(job.dir()),
            JobSummary::Unreadable { dir, .. } => disk_bytes(dir),
        })
        .collect();
    let total: u64 = sizes.iter().sum();
    if json {
        let rows: Vec<serde_json::Value> = list
            .iter()
            .map(|j| match j {
                JobSummary::Readable { job, state } => json!({
                    "id": job.id(), "state": state_word(effective_state(job, state)),
                    "run_state": state.run_state, "exit_code": state.exit_code,
                    "workdir": state.workdir, "command": state.command,
                    "created_at_unix_ms": state.created_at_unix_ms,
                    "changed_files": state.changed_files,
                    "disk_bytes": disk_bytes(job.dir()),
                    "labels": state.labels, "task_id": state.task_id,
                }),
                JobSummary::Unreadable { id, dir, error } => json!({
                    "id": id, "state": "unreadable", "dir": dir, "error": error,
                }),
            })
            .collect();
        crate::print_json(&rows)?;
        return Ok(OK);
    }
    let mut o = String::new();
    if list.is_empty() {
        o.push_str(if filtered {
            "no job matches: `cofferdam jobs` without filters lists them all\n"
        } else {
            "no jobs yet: start one with `cofferdam run -- COMMAND`\n"
        });
    }
    for (j, size) in list.iter().zip(&sizes) {
        match j {
            JobSummary::Readable { job, state } => {
                let st = state_word(effective_state(job, state));
                let tags: String = state
                    .task_id
                    .iter()
                    .map(|t| format!("  task={t}"))
                    .chain(state.labels.iter().map(|(k, v)| format!("  {k}={v}")))
                    .collect();
                let _ = writeln!(
                    o,
                    "{}  {:<11} {:>4} changes  {:<12} {:>9}  {}  {}{}",
                    escape(job.id()),
                    st,
                    state
                        .changed_files
                        .map_or("?".to_owned(), |n| n.to_string()),
                    job_ending(job, state),
                    human_bytes(*size),
                    s.dim(&crate::shown_path(&state.workdir)),
                    shell_words(&state.command),
                    if tags.is_empty() {
                        String::new()
                    } else {
                        s.dim(&escape(&tags))
                    }
                );
            }
            JobSummary::Unreadable { id, error, .. } => {
                let _ = writeln!(
                    o,
                    "{}  {}",
                    escape(id),
                    s.bad(&escape(&format!("unreadable: {error}")))
                );
            }
        }
    }
    if !list.is_empty() {
        let _ = writeln!(
            o,
            "{}",
            s.dim(&format!(
                "{} job(s), {} on disk in {}",
                list.len(),
                human_bytes(total),
                crate::shown_path(&store.root().join("jobs"))
            ))
        );
    }
    crate::write_stdout(o.as_bytes())?;
    Ok(OK)
}

/// The disk a job directory takes (allocated blocks, so a sparse file counts what it
/// holds), without following symlinks or leaving its filesystem; unreadable parts count 0.
pub(crate) fn disk_bytes(dir: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(top) = std::fs::symlink_metadata(dir) else {
        return 0;
    };
    let mut total = top.blocks() * 512;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let Ok(m) = e.metadata() else { continue };
            total += m.blocks() * 512;
            if m.is_dir() && m.dev() == top.dev() {
                stack.push(e.path());
            }
        }
    }
    total
}

/// The `.git` directories the remaining changes touch, in git's terms; empty when the
/// stage cannot be read (the change list still shows every path).
fn git_summaries(job: &Job, workdir: &std::path::Path) -> Vec<GitSummary> {
    use std::os::fd::AsFd as _;
    let (Ok(stage), Ok(target), Ok(upper)) = (
        Stage::load(job),
        std::fs::File::open(workdir),
        std::fs::File::open(job.upper()),
    ) else {
        return Vec::new();
    };
    let remaining: Vec<_> = stage.remaining().cloned().collect();
    cofferdam_stage::gitsummary::summarize_stage(target.as_fd(), upper.as_fd(), &remaining)
}

/// Whether `path` lies beneath the `objects/` of a summarised `.git`.
fn is_git_object(git: &[GitSummary], path: &[u8]) -> bool {
    git.iter().any(|g| {
        path.strip_prefix(g.git_dir.as_slice())
            .is_some_and(|rest| rest.starts_with(b"/objects/"))
    })
}

/// An object id shortened as git shows it; anything else (`ref: …`) escaped whole.
fn short_id(v: &str) -> String {
    if v.len() >= 7 && v.bytes().all(|b| b.is_ascii_hexdigit()) {
        v[..7].to_owned()
    } else {
        escape(v)
    }
}

/// How many commit subjects a review lists per `.git`.
const GIT_SUBJECTS: usize = 10;

/// One `.git` directory's changes: HEAD, refs added, moved or deleted, objects counted.
fn render_git(o: &mut String, g: &GitSummary, objects_hidden: bool, s: Style) {
    let dir = escape(&String::from_utf8_lossy(&g.git_dir));
    let _ = writeln!(o, "\n{}", s.heading(&format!("Git ({dir})")));
    if let Some((old, new)) = &g.head {
        let show = |v: &Option<String>| v.as_deref().map_or("(none)".to_owned(), short_id);
        let _ = writeln!(o, "  HEAD      {} → {}", show(old), show(new));
    }
    for r in &g.refs {
        let (what, name) = if let Some(b) = r.name.strip_prefix("refs/heads/") {
            ("branch", b)
        } else if let Some(t) = r.name.strip_prefix("refs/tags/") {
            ("tag", t)
        } else {
            ("ref", r.name.as_str())
        };
        let change = match (&r.old, &r.new) {
            (None, Some(new)) => s.good(&format!("added at {}", short_id(new))),
            (Some(old), Some(new)) => {
                s.warn(&format!("moved {}..{}", short_id(old), short_id(new)))
            }
            (Some(old), None) => s.bad(&format!("deleted (was {})", short_id(old))),
            (None, None) => continue,
        };
        let _ = writeln!(o, "  {what:<9} {} {change}", escape(name));
    }
    if g.refs.is_empty() && g.head.is_none() {
        let _ = writeln!(o, "  {}", s.dim("no branch, tag or HEAD changed"));
    }
    if !g.commits.is_empty() {
        let _ = writeln!(o, "  commits   {} new", thousands(g.commits.len()));
        for subject in g.commits.iter().take(GIT_SUBJECTS) {
            let _ = writeln!(o, "    {} {}", s.dim("-"), escape(subject));
        }
        if g.commits.len() > GIT_SUBJECTS {
            let _ = writeln!(o, "    … and {} more", g.commits.len() - GIT_SUBJECTS);
        }
    }
    if g.packs > 0 {
        let _ = writeln!(
            o,
            "  {}",
            s.dim("commits in pack files are not read: `git log` after applying shows them")
        );
    }
    if g.loose_objects + g.packs > 0 {
        let _ = writeln!(
            o,
            "  objects   {} loose object file(s), {} pack(s) added{}",
            thousands(g.loose_objects),
            thousands(g.packs),
            if objects_hidden {
                s.dim(" (not listed above; --all lists them)")
            } else {
                String::new()
            }
        );
    }
}

/// The tail of a rolled-up directory's line: `  (1,712 file(s), 3 dir(s), 38.2 MiB; --all
/// lists them)`.
pub(crate) fn rollup_note(files: usize, dirs: usize, bytes: u64, s: Style) -> String {
    let mut what = vec![format!("{} file(s)", thousands(files))];
    if dirs > 0 {
        what.push(format!("{} dir(s)", thousands(dirs)));
    }
    what.push(human_bytes(bytes));
    format!(
        "  {}",
        s.dim(&format!("({}; --all lists them)", what.join(", ")))
    )
}

/// A count with thousands separated by commas: `1,712`.
pub(crate) fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(d);
    }
    out
}

/// Bytes for a person: B, KiB, MiB, GiB with one decimal.
pub(crate) fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// How a listed job's run ended: `exit N` when the command exited, else the bundle's word
/// for it (`oom`, `timeout`, `cancelled`, ...), read only for those jobs; `-` while it runs.
fn job_ending(job: &Job, state: &JobState) -> String {
    use cofferdam_record::bundle::RunState;
    match (state.run_state, state.exit_code) {
        (None, _) => "-".to_owned(),
        (Some(RunState::Completed), _) => "exit 0".to_owned(),
        (Some(_), code) => match load_bundle(job) {
            Ok(Some(b)) => ending_word(&b),
            _ => code.map_or_else(|| "failed".to_owned(), |c| format!("exit {c}")),
        },
    }
}

/// The stage as it stands now: what was applied, what remains, and what applying the rest
/// would conflict with on the host today.
struct StageReview {
    applied: Vec<String>,
    remaining: Vec<String>,
    /// Changes a per-path drop discarded.
    dropped: Vec<String>,
    conflicts: Vec<(String, String)>,
    /// Remaining changes that run code or change policy once applied, with why.
    sensitive: Vec<(String, String)>,
    /// How a path was applied, when not whole: merged (from the trace) or some hunks
    /// (from the ledger), by display path.
    how: std::collections::HashMap<String, String>,
}

/// The paths the trace says were merged, with how (the last apply of each wins).
fn merged_paths(job: &Job) -> std::collections::HashMap<String, String> {
    let mut out = std::collections::HashMap::new();
    let Ok(text) = std::fs::read_to_string(job.trace_path()) else {
        return out;
    };
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let e = &v["event"];
        if e["type"] != "apply_path" {
            continue;
        }
        let (Some(path), Some(outcome)) = (e["path"].as_str(), e["outcome"].as_str()) else {
            continue;
        };
        match outcome {
            "merged" => out.insert(path.to_owned(), "merged with the host's edits".to_owned()),
            "merged_with_markers" => out.insert(
                path.to_owned(),
                "merged, with conflict markers to resolve".to_owned(),
            ),
            _ => out.remove(path),
        };
    }
    out
}

/// Build the stage review; `None` when the stage cannot be read (the bundle view still
/// shows the run). Reads only the changed paths on the host, never the whole workdir.
fn review_stage(job: &Job, workdir: &std::path::Path) -> Option<StageReview> {
    let stage = Stage::load(job).ok()?;
    let (mut applied, mut remaining, mut indices) = (Vec::new(), Vec::new(), Vec::new());
    let mut dropped = Vec::new();
    for (i, c) in stage.changes.iter().enumerate() {
        if stage.is_remaining(i) {
            remaining.push(c.display.clone());
            indices.push(i);
        } else if stage.ledger.is_applied(&c.path) {
            applied.push(c.display.clone());
        } else {
            dropped.push(c.display.clone());
        }
    }
    let conflicts = if indices.is_empty() {
        Vec::new()
    } else {
        match apply::check(
            workdir,
            &job.upper(),
            &stage,
            &indices,
            &apply::Options::default(),
        ) {
            Ok(checked) => checked
                .conflicts
                .iter()
                .map(|c| (c.display.clone(), c.reason.to_string()))
                .collect(),
            Err(e) => vec![(String::from("(stage)"), e.to_string())],
        }
    };
    let sensitive = match crate::cmd::jobrules::sensitivities(&stage, workdir, &job.upper()) {
        Ok(v) => v
            .iter()
            .enumerate()
            .filter_map(|(i, r)| Some((stage.changes[i].display.clone(), r.as_ref()?.to_string())))
            .collect(),
        Err(e) => vec![(String::from("(stage)"), e.message)],
    };
    let mut how = merged_paths(job);
    for c in &stage.changes {
        if let Some(p) = stage.ledger.partial(&c.path)
            && !stage.ledger.is_applied(&c.path)
        {
            how.insert(
                c.display.clone(),
                format!("{} hunk(s) applied, the rest staged", p.hunks.hunks.len()),
            );
        }
    }
    Some(StageReview {
        applied,
        remaining,
        dropped,
        conflicts,
        sensitive,
        how,
    })
}

fn render_stage(o: &mut String, r: &StageReview, s: Style) {
    render_sensitive(o, r, s);
    if r.applied.is_empty() && r.dropped.is_empty() && r.conflicts.is_empty() && r.how.is_empty() {
        return;
    }
    let dropped = if r.dropped.is_empty() {
        String::new()
    } else {
        format!(", {} dropped", r.dropped.len())
    };
    let _ = writeln!(
        o,
        "\n{}",
        s.heading(&format!(
            "Stage: {} applied, {} remaining{dropped}",
            r.applied.len(),
            r.remaining.len()
        ))
    );
    let how = |p: &str| {
        r.how
            .get(p)
            .map_or(String::new(), |h| s.dim(&format!("  ({h})")))
    };
    for p in &r.applied {
        let _ = writeln!(o, "  {} {}{}", s.dim("applied     "), escape(p), how(p));
    }
    for p in &r.remaining {
        let _ = writeln!(o, "  {} {}{}", s.warn("remaining   "), escape(p), how(p));
    }
    for p in &r.dropped {
        let _ = writeln!(o, "  {} {}", s.dim("dropped     "), escape(p));
    }
    if !r.conflicts.is_empty() {
        let _ = writeln!(
            o,
            "\n{}",
            s.heading(&format!(
                "Conflicts if applied now ({}): `apply` would refuse with exit 3",
                r.conflicts.len()
            ))
        );
        for (path, reason) in &r.conflicts {
            let _ = writeln!(
                o,
                "  {} {}: {}",
                s.bad("conflict    "),
                escape(path),
                escape(reason)
            );
        }
    }
}

/// The staged changes that run code or change policy once applied.
fn render_sensitive(o: &mut String, r: &StageReview, s: Style) {
    if r.sensitive.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "\n{}",
        s.heading(&format!(
            "Runs code or changes policy once applied ({}): a bare `apply` leaves these staged",
            r.sensitive.len()
        ))
    );
    for (path, why) in &r.sensitive {
        let _ = writeln!(o, "  {} {}: {}", s.bad("!"), escape(path), escape(why));
    }
}

#[cfg(test)]
mod tests {
    use super::{human_duration, thousands};

    #[test]
    fn counts_with_thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_712), "1,712");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }

    #[test]
    fn durations_from_under_a_millisecond_to_hours() {
        assert_eq!(human_duration(0), "<1 ms");
        assert_eq!(human_duration(7), "7 ms");
        assert_eq!(human_duration(999), "999 ms");
        assert_eq!(human_duration(1_250), "1.2 s");
        assert_eq!(human_duration(59_999), "59.9 s");
        assert_eq!(human_duration(61_000), "1m 01s");
        assert_eq!(human_duration(3 * 3_600_000 + 5 * 60_000 + 7_000), "3h 05m");
        assert_eq!(human_duration(100 * 3_600_000), "100h 00m");
    }
}
