//! `cofferdam apply JOB [--path P]… [--path-bytes HEX]… [--exclude GLOB]… [--dry-run] [--force PATH]…
//! [--allow-special] [--allow-sensitive] [--hunks ID,…|--interactive] [--merge[=markers]]`:
//! let staged changes into the workdir (hunks and merges: `crate::cmd::apply_hunks`). Changes that
//! run code or change policy later (`cofferdam_stage::sensitive`) stay staged unless a
//! `--path` names them or `--allow-sensitive` is given. The decisions and the writes are
//! `cofferdam_stage::{select, apply}`'s; this module resolves and locks the job, finishes
//! an interrupted batch, prints what happened, and records it (trace events, `job.json`).

use crate::cli::ApplyArgs;
use crate::cmd::apply_hunks;
use crate::cmd::jobref;
use crate::cmd::jobrules::{
    finish_interrupted, job_failure, kind_word, kinds_of, lock, normalize_paths, now_ms,
    painted_mode, require_sealed, sensitivities, stage_failure,
};
use crate::cmd::recover::settled_state;
use crate::exit::{CONFLICT, Failure, OK};
use crate::style::Style;
use cofferdam_record::bundle::ChangeKind;
use cofferdam_record::shown::escape;
use cofferdam_record::trace::{ApplyOutcome, ApplyPathOutcome, TraceEventKind};
use cofferdam_stage::apply::{self, Checked, Options, Step};
use cofferdam_stage::job::{Job, StageState};
use cofferdam_stage::review::Stage;
use cofferdam_stage::select::{self, Because, Glob, Hold, Selection, Sensitive};
use cofferdam_stage::sensitive::Reason;
use cofferdam_stage::trace_log::TraceLog;
use serde_json::json;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::os::unix::ffi::OsStrExt;

/// How many paths a text listing shows before summarizing the rest.
const LIST_LIMIT: usize = 200;

/// Select changes of `stage` for `paths`/`excludes`, holding back the sensitive ones
/// (`reasons`) unless `allow_all`.
fn selection(
    stage: &Stage,
    paths: &[Vec<u8>],
    excludes: &[Glob],
    pending: &BTreeSet<Vec<u8>>,
    reasons: &[Option<Reason>],
    allow_all: bool,
) -> Result<Selection, Failure> {
    let nodes = stage.nodes();
    let marked: Vec<bool> = reasons.iter().map(Option::is_some).collect();
    let sensitive = Sensitive {
        marked: &marked,
        allow_all,
    };
    select::select_holding(&nodes, paths, excludes, pending, sensitive).map_err(Failure::usage)
}

/// Why a held path is held, for display.
fn hold_text(h: &Hold, reason: Option<&Reason>) -> String {
    match (h, reason) {
        (Hold::Sensitive, Some(r)) => r.to_string(),
        (Hold::Sensitive, None) => "sensitive".to_owned(),
        (Hold::Contains(p), _) => format!(
            "applied whole, and it holds {}",
            cofferdam_stage::seal::display_path(p).0
        ),
        (Hold::InsideHeld(p), _) => format!(
            "inside {}, which is held",
            cofferdam_stage::seal::display_path(p).0
        ),
    }
}

/// The held paths (text): what they are, why, and how to apply them.
fn render_held(
    o: &mut String,
    id: &str,
    stage: &Stage,
    sel: &Selection,
    reasons: &[Option<Reason>],
    s: Style,
) {
    if sel.held.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "{}",
        s.warn(&format!(
            "held back: {} path(s) that run code or change policy once applied stay staged",
            sel.held.len()
        ))
    );
    for (i, h) in sel.held.iter().take(LIST_LIMIT) {
        let _ = writeln!(
            o,
            "  {} {}: {}",
            s.bad("!"),
            escape(&stage.changes[*i].display),
            escape(&hold_text(h, reasons.get(*i).and_then(Option::as_ref)))
        );
    }
    if sel.held.len() > LIST_LIMIT {
        let _ = writeln!(o, "  … and {} more", sel.held.len() - LIST_LIMIT);
    }
    let _ = writeln!(
        o,
        "review with `cofferdam diff {id} --path PATH`; apply one with `cofferdam apply {id} \
         --path PATH`, or all with `--allow-sensitive`"
    );
}

/// The held paths (JSON).
fn held_json(stage: &Stage, sel: &Selection, reasons: &[Option<Reason>]) -> serde_json::Value {
    sel.held
        .iter()
        .map(|(i, h)| {
            json!({"path": stage.changes[*i].display,
                   "reason": hold_text(h, reasons.get(*i).and_then(Option::as_ref))})
        })
        .collect()
}

#[cfg(debug_assertions)]
fn test_hook() -> impl FnMut(Step) {
    // Test-only (debug builds): `COFFERDAM_TEST_APPLY_KILL_AT` / `..._PAUSE_AT` =
    // `prepare:N` | `committing` | `commit:N` | `synced` | `cleaned`.
    let parse = |name: &str| {
        let v = std::env::var(name).ok()?;
        let (what, n) = v.split_once(':').unwrap_or((v.as_str(), "0"));
        let n: usize = n.parse().ok()?;
        Some(match what {
            "prepare" => Step::Prepared(n),
            "committing" => Step::Committing,
            "commit" => Step::Committed(n),
            "synced" => Step::Synced,
            "cleaned" => Step::Cleaned,
            _ => return None,
        })
    };
    let kill = parse("COFFERDAM_TEST_APPLY_KILL_AT");
    let pause = parse("COFFERDAM_TEST_APPLY_PAUSE_AT");
    move |step| {
        if Some(step) == kill {
            let me = rustix::process::getpid();
            let _ = rustix::process::kill_process(me, rustix::process::Signal::KILL);
        }
        if Some(step) == pause {
            eprintln!("cofferdam: test hook: paused at {step:?}");
            loop {
                std::thread::sleep(std::time::Duration::from_secs(60));
            }
        }
    }
}

#[cfg(not(debug_assertions))]
fn test_hook() -> impl FnMut(Step) {
    |_| {}
}

/// `cofferdam apply`.
pub fn apply(a: &ApplyArgs, json: bool, s: Style) -> Result<u8, Failure> {
    let (env, job) = jobref::open(&a.job)?;
    let lock = lock(&job, "apply")?;
    let state = settled_state(&job, &lock)?;
    require_sealed(&job, &state, "apply")?;
    let workdir = state.workdir.clone();
    let mut stage = Stage::load(&job).map_err(stage_failure)?;
    let mut trace = TraceLog::open(&job.trace_path()).map_err(Failure::setup)?;

    // An interrupted batch: finish its bookkeeping (or, for a dry run, just look).
    let mut pending: BTreeSet<Vec<u8>> = stage.ledger.pending.iter().map(|p| p.0.clone()).collect();
    if a.dry_run {
        if let Some(view) = apply::inspect(&workdir, &stage.ledger).map_err(Failure::setup)? {
            eprintln!(
                "cofferdam: an earlier apply of job {} was interrupted ({} path(s) written, {} \
                 not); a real apply finishes it first",
                job.id(),
                view.written.len(),
                view.not_written.len()
            );
            // A file written with some of its hunks stays staged, recorded as written
            // (in memory: as the real apply's recovery will).
            let partial: Vec<_> = stage
                .ledger
                .batch
                .iter()
                .flat_map(|b| &b.ops)
                .filter_map(|op| Some((op.path.clone(), op.partial.clone()?)))
                .filter(|(p, _)| view.written.contains(&p.0))
                .collect();
            let host =
                cofferdam_stage::fingerprint::HostRoot::open(&workdir).map_err(Failure::setup)?;
            for (p, hunks) in &partial {
                let fp = host.fingerprint(p.as_path()).map_err(Failure::setup)?;
                stage.ledger.set_partial(p.as_bytes(), hunks.clone(), fp);
            }
            stage.take_partial_records();
            for p in &view.written {
                if partial.iter().all(|(q, _)| q.as_bytes() != p.as_slice()) {
                    stage
                        .ledger
                        .applied
                        .insert(cofferdam_stage::ledger::RelPath(p.clone()));
                }
            }
            pending.extend(view.not_written);
        }
    } else {
        let kinds = kinds_of(&stage);
        finish_interrupted(
            &job,
            &workdir,
            &mut stage.ledger,
            &mut trace,
            &|p| kinds.get(p).copied().unwrap_or(ChangeKind::Modified),
            true,
        )?;
        pending = stage.ledger.pending.iter().map(|p| p.0.clone()).collect();
        stage.take_partial_records();
    }

    if stage.remaining().count() == 0 {
        if !a.dry_run && state.state != StageState::Applied {
            job.update(|st| st.state = StageState::Applied)
                .map_err(job_failure)?;
        }
        return finish_output(
            json,
            &json!({"job": job.id(), "dry_run": a.dry_run, "applied": [], "remaining": [],
                    "state": "applied", "message": "nothing left to apply"}),
            &format!(
                "nothing left to apply: every change of job {} is applied\n",
                job.id()
            ),
        );
    }

    let mut paths = normalize_paths(&a.paths, &workdir, &env.places.cwd)?;
    paths.extend(crate::cmd::drop::hex_paths(&a.path_bytes, &workdir)?);
    let excludes: Vec<Glob> = a
        .exclude
        .iter()
        .map(|g| Glob::new(g.as_os_str().as_bytes()).map_err(Failure::usage))
        .collect::<Result<_, _>>()?;
    let force = normalize_paths(&a.force, &workdir, &env.places.cwd)?;
    for (glob, written) in excludes.iter().zip(&a.exclude) {
        if !stage.changes.iter().any(|c| glob.excludes(&c.path)) {
            eprintln!(
                "cofferdam: warning: --exclude {} matches no staged change of job {}; nothing \
                 is left out for it (see the paths with `cofferdam diff {} --stat`)",
                crate::shown_path(written),
                job.id(),
                job.id()
            );
        }
    }
    let reasons = sensitivities(&stage, &workdir, &job.upper())?;
    let hunk_plan = if a.interactive {
        match apply_hunks::interactive(&job, &stage, &workdir, s)? {
            Some(p) => Some(p),
            None => {
                return finish_output(
                    json,
                    &json!({"job": job.id(), "dry_run": false, "applied": [],
                            "message": "no hunk chosen"}),
                    "no hunk chosen; nothing was written\n",
                );
            }
        }
    } else if !a.hunks.is_empty() {
        Some(apply_hunks::by_ids(
            &job, &stage, &workdir, &a.hunks, a.dry_run,
        )?)
    } else {
        None
    };
    let paths = hunk_plan.as_ref().map_or(paths, |p| p.paths.clone());
    let sel = selection(
        &stage,
        &paths,
        &excludes,
        &pending,
        &reasons,
        a.allow_sensitive,
    )?;
    if sel.indices.is_empty() {
        let mut text = String::from(if sel.held.is_empty() {
            "nothing selected: every staged change matched an --exclude\n"
        } else {
            "nothing applied: every selected change is held back\n"
        });
        render_held(&mut text, job.id(), &stage, &sel, &reasons, s);
        return finish_output(
            json,
            &json!({"job": job.id(), "dry_run": a.dry_run, "applied": [],
                    "held_sensitive": held_json(&stage, &sel, &reasons),
                    "message": "nothing selected"}),
            &text,
        );
    }
    let mut opts = Options {
        force,
        allow_special: a.allow_special,
        rewrite: hunk_plan
            .as_ref()
            .map(|p| p.rewrite.clone())
            .unwrap_or_default(),
    };
    let upper = job.upper();
    let mut checked =
        apply::check(&workdir, &upper, &stage, &sel.indices, &opts).map_err(Failure::setup)?;
    // `--merge`: the refused text files are merged with the host's edits, then checked
    // again against the host file each merge read.
    let mut merge_plan = None;
    if checked.refused()
        && let Some(how) = &a.merge
    {
        let plan = apply_hunks::merges(&job, &stage, &workdir, &checked, how == "markers")?;
        if plan.refused.is_empty() && !plan.rewrite.is_empty() {
            opts.rewrite.extend(plan.rewrite.clone());
            checked = apply::check(&workdir, &upper, &stage, &sel.indices, &opts)
                .map_err(Failure::setup)?;
        }
        merge_plan = Some(plan);
    }
    let extra = Extra {
        partial: hunk_plan
            .as_ref()
            .map(|p| p.partial.clone())
            .unwrap_or_default(),
        merged: merge_plan
            .as_ref()
            .filter(|p| p.refused.is_empty())
            .map(|p| p.merged.clone())
            .unwrap_or_default(),
    };
    let selected = checked.indices();
    let started = TraceEventKind::ApplyStarted {
        paths: selected.len(),
        dry_run: a.dry_run,
    };
    crate::trace_append::append(&mut trace, vec![(now_ms(), started)], "the apply's start");

    if checked.refused() {
        let at = now_ms();
        let path = |display: &str, index: usize, outcome| {
            let kind = TraceEventKind::ApplyPath {
                path: display.to_owned(),
                kind: stage.changes[index].kind,
                outcome,
            };
            (at, kind)
        };
        let mut events: Vec<_> = checked
            .conflicts
            .iter()
            .map(|c| path(&c.display, c.index, ApplyPathOutcome::Conflict))
            .collect();
        events.extend(
            checked
                .refusals
                .iter()
                .map(|r| path(&r.display, r.index, ApplyPathOutcome::Refused)),
        );
        events.push((
            at,
            TraceEventKind::ApplyFinished {
                outcome: ApplyOutcome::Refused,
                applied: 0,
                conflicts: checked.conflicts.len(),
            },
        ));
        crate::trace_append::append(&mut trace, events, "the refused apply's conflicts");
        print_refusal(&job, &stage, &checked, merge_plan.as_ref(), json, s)?;
        return Ok(CONFLICT);
    }

    if a.dry_run {
        let at = now_ms();
        let mut events = paths_event(&stage, &selected, at, ApplyPathOutcome::Planned);
        events.push((
            at,
            TraceEventKind::ApplyFinished {
                outcome: ApplyOutcome::DryRun,
                applied: 0,
                conflicts: 0,
            },
        ));
        crate::trace_append::append(&mut trace, events, "the dry run's plan");
        let partial: BTreeSet<usize> = extra.partial.iter().map(|p| p.0).collect();
        let whole: Vec<usize> = selected
            .iter()
            .copied()
            .filter(|i| !partial.contains(i))
            .collect();
        let remaining = remaining_after(&stage, &whole);
        return print_result(
            &job, &stage, &sel, &reasons, &checked, &whole, &remaining, true, json, s, &extra,
        );
    }

    let mut test = test_hook();
    let mut line = crate::progress::Line::new(crate::progress::wanted(json, false));
    let ops = checked.units.iter().filter(|u| u.action.is_some()).count() as u64;
    let mut hook = |step: Step| {
        crate::progress::applying(&mut line, ops, step);
        test(step);
    };
    let result = apply::execute(
        &workdir,
        &upper,
        &job.ledger_path(),
        &mut stage,
        &checked,
        &mut hook,
    );
    let at = now_ms();
    match result {
        Ok(report) => {
            let mut events = paths_event(&stage, &report.applied, at, ApplyPathOutcome::Applied);
            for (i, markers) in &extra.merged {
                let outcome = if *markers {
                    ApplyPathOutcome::MergedWithMarkers
                } else {
                    ApplyPathOutcome::Merged
                };
                for e in &mut events {
                    if let TraceEventKind::ApplyPath {
                        path, outcome: o, ..
                    } = &mut e.1
                        && *path == stage.changes[*i].display
                    {
                        *o = outcome;
                    }
                }
            }
            events.extend(paths_event(
                &stage,
                &report.partial,
                at,
                ApplyPathOutcome::Partial,
            ));
            events.push((
                at,
                TraceEventKind::ApplyFinished {
                    outcome: ApplyOutcome::Applied,
                    applied: report.applied.len(),
                    conflicts: 0,
                },
            ));
            crate::trace_append::append(&mut trace, events, "which paths the apply wrote");
            let remaining: Vec<usize> = (0..stage.changes.len())
                .filter(|&i| stage.is_remaining(i))
                .collect();
            if remaining.is_empty() {
                job.update(|st| st.state = StageState::Applied)
                    .map_err(job_failure)?;
            }
            print_result(
                &job,
                &stage,
                &sel,
                &reasons,
                &checked,
                &report.applied,
                &remaining,
                false,
                json,
                s,
                &extra,
            )
        }
        Err(e) => {
            let failed = TraceEventKind::ApplyFinished {
                outcome: ApplyOutcome::Failed,
                applied: 0,
                conflicts: 0,
            };
            crate::trace_append::append(&mut trace, vec![(at, failed)], "the apply's failure");
            Err(Failure::setup(format!(
                "apply of job {} failed: {e}",
                job.id()
            )))
        }
    }
}

/// One `ApplyPath` event with `outcome` for each of the `indices` of `stage`.
fn paths_event(
    stage: &Stage,
    indices: &[usize],
    at: u64,
    outcome: ApplyPathOutcome,
) -> Vec<(u64, TraceEventKind)> {
    indices
        .iter()
        .map(|&i| {
            let c = &stage.changes[i];
            let kind = TraceEventKind::ApplyPath {
                path: c.display.clone(),
                kind: c.kind,
                outcome,
            };
            (at, kind)
        })
        .collect()
}

fn remaining_after(stage: &Stage, selected: &[usize]) -> Vec<usize> {
    let sel: BTreeSet<usize> = selected.iter().copied().collect();
    (0..stage.changes.len())
        .filter(|&i| stage.is_remaining(i) && !sel.contains(&i))
        .collect()
}

fn finish_output(json: bool, value: &serde_json::Value, text: &str) -> Result<u8, Failure> {
    if json {
        crate::print_json(value)?;
    } else {
        crate::write_stdout(text.as_bytes())?;
    }
    Ok(OK)
}

fn print_refusal(
    job: &Job,
    stage: &Stage,
    checked: &Checked,
    merge: Option<&apply_hunks::MergePlan>,
    json: bool,
    s: Style,
) -> Result<(), Failure> {
    let id = job.id();
    if json {
        let conflicts: Vec<_> = checked
            .conflicts
            .iter()
            .map(|c| {
                json!({"path": c.display, "reason": c.reason.code(), "message": c.reason.to_string(),
                       "forceable": c.forceable})
            })
            .collect();
        let refused: Vec<_> = checked
            .refusals
            .iter()
            .map(|r| json!({"path": r.display, "what": r.what}))
            .collect();
        let mut v = json!({
            "job": id, "refused": true, "written": 0,
            "conflicts": conflicts, "special_files": refused,
        });
        if let Some(m) = merge {
            v["not_merged"] = apply_hunks::refused_json(stage, m);
        }
        crate::print_json(&v)?;
        return Ok(());
    }
    let mut o = String::new();
    let _ = writeln!(
        o,
        "cofferdam: {} nothing was written to the workdir",
        s.bad(&format!(
            "apply refused: {} conflict(s), {} special file(s);",
            checked.conflicts.len(),
            checked.refusals.len()
        ))
    );
    for c in &checked.conflicts {
        let _ = writeln!(
            o,
            "  {} {}: {}",
            s.bad("conflict"),
            escape(&c.display),
            escape(&c.reason.to_string())
        );
    }
    for r in &checked.refusals {
        let _ = writeln!(
            o,
            "  {} {}: a staged {}; recreate it with --allow-special, or leave it out with \
             --exclude",
            s.bad("refused "),
            escape(&r.display),
            escape(r.what)
        );
    }
    if let Some(m) = merge {
        apply_hunks::render_refused(&mut o, stage, m, s);
    }
    if checked.conflicts.iter().any(|c| c.forceable) {
        let _ = writeln!(
            o,
            "fix: review with `cofferdam diff {id} --path PATH`; keep your version with \
             `--exclude PATH`, or take the staged one with `--force PATH`"
        );
    }
    eprint!("{o}");
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn print_result(
    job: &Job,
    stage: &Stage,
    sel: &Selection,
    reasons: &[Option<Reason>],
    checked: &Checked,
    applied: &[usize],
    remaining: &[usize],
    dry_run: bool,
    json: bool,
    s: Style,
    extra: &Extra,
) -> Result<u8, Failure> {
    let id = job.id();
    let because = |b: &Because| match b {
        Because::ParentOf(p) => format!("parent of {}", cofferdam_stage::seal::display_path(p).0),
        Because::InsideWhole(p) => format!(
            "inside {}, which is applied whole",
            cofferdam_stage::seal::display_path(p).0
        ),
    };
    if json {
        let list = |v: &[usize]| -> Vec<serde_json::Value> {
            v.iter()
                .map(|&i| {
                    let c = &stage.changes[i];
                    let mode = c.mode.map(|m| format!("{m:04o}"));
                    json!({"path": c.display, "kind": c.kind, "mode": mode})
                })
                .collect()
        };
        let added: Vec<_> = sel
            .added
            .iter()
            .map(|(i, b)| json!({"path": stage.changes[*i].display, "because": because(b)}))
            .collect();
        let stripped: Vec<_> = checked
            .stripped
            .iter()
            .map(|x| json!({"path": x.display, "from": format!("{:04o}", x.from), "to": format!("{:04o}", x.to)}))
            .collect();
        let forced: Vec<_> = checked
            .forced
            .iter()
            .map(|c| json!({"path": c.display, "reason": c.reason.code(), "message": c.reason.to_string()}))
            .collect();
        let mut v = json!({
            "job": id, "dry_run": dry_run,
            (if dry_run { "would_apply" } else { "applied" }): list(applied),
            "dependencies": added, "setuid_stripped": stripped, "forced": forced,
            "git_index_taken": checked.git_index_taken.iter()
                .map(|c| json!({"path": c.display, "reason": c.reason.code(), "message": c.reason.to_string()}))
                .collect::<Vec<_>>(),
            "held_sensitive": held_json(stage, sel, reasons),
            "remaining": list(remaining),
            "state": if remaining.is_empty() && !dry_run { "applied" } else { "staged" },
        });
        extra.to_json(&mut v, stage);
        crate::print_json(&v)?;
        return Ok(OK);
    }
    let mut o = String::new();
    let verb = if dry_run { "would apply" } else { "applied" };
    let _ = writeln!(
        o,
        "{} {} path(s) of job {id} to {}",
        s.heading(verb),
        applied.len(),
        job.state()
            .map(|st| st.workdir.display().to_string())
            .unwrap_or_default()
    );
    for &i in applied.iter().take(LIST_LIMIT) {
        let c = &stage.changes[i];
        let mode = painted_mode(c.kind, c.mode, c.new_is_dir(), s);
        let _ = writeln!(
            o,
            "  {:<12} {}{mode}",
            s.good(kind_word(c.kind)),
            escape(&c.display)
        );
    }
    if applied.len() > LIST_LIMIT {
        let _ = writeln!(
            o,
            "  … and {} more (--json lists all)",
            applied.len() - LIST_LIMIT
        );
    }
    extra.render(&mut o, stage, dry_run, s);
    if !sel.added.is_empty() {
        let _ = writeln!(o, "{}", s.heading("included as dependencies"));
        for (i, b) in sel.added.iter().take(LIST_LIMIT) {
            let _ = writeln!(
                o,
                "  {}  {}",
                escape(&stage.changes[*i].display),
                s.dim(&escape(&because(b)))
            );
        }
        if sel.added.len() > LIST_LIMIT {
            let _ = writeln!(o, "  … and {} more", sel.added.len() - LIST_LIMIT);
        }
        for &i in &sel.excluded_but_required {
            let _ = writeln!(
                o,
                "  {} {} matched --exclude but is required",
                s.warn("note:"),
                stage.changes[i].display
            );
        }
    }
    for x in &checked.stripped {
        let _ = writeln!(
            o,
            "{} {}: setuid/setgid not carried over ({:04o} → {:04o})",
            s.warn("stripped"),
            x.display,
            x.from,
            x.to
        );
    }
    for c in &checked.forced {
        let _ = writeln!(
            o,
            "{} {}: {}",
            s.warn("forced  "),
            escape(&c.display),
            escape(&c.reason.to_string())
        );
    }
    for c in &checked.git_index_taken {
        let _ = writeln!(
            o,
            "{} {}: {}; it is a cache git rewrites (a `git status` does), so the staged one, \
             which matches the staged commits, {}; anything `git add` staged on the host \
             during the run must be added again",
            s.warn("git index"),
            escape(&c.display),
            escape(&c.reason.to_string()),
            if dry_run {
                "would be taken"
            } else {
                "was taken"
            }
        );
    }
    render_held(&mut o, id, stage, sel, reasons, s);
    if remaining.is_empty() {
        if !dry_run {
            let _ = writeln!(o, "every change is applied; job {id} is now `applied`");
        }
    } else {
        let _ = writeln!(
            o,
            "{}",
            s.heading(&format!("{} path(s) remain staged", remaining.len()))
        );
        for &i in remaining.iter().take(LIST_LIMIT) {
            let c = &stage.changes[i];
            let _ = writeln!(
                o,
                "  {:<12} {}",
                s.dim(kind_word(c.kind)),
                escape(&c.display)
            );
        }
        if remaining.len() > LIST_LIMIT {
            let _ = writeln!(o, "  … and {} more", remaining.len() - LIST_LIMIT);
        }
        let _ = writeln!(
            o,
            "next: cofferdam diff {id}  ·  cofferdam apply {id}  ·  cofferdam drop {id}"
        );
    }
    crate::write_stdout(o.as_bytes())?;
    Ok(OK)
}

/// What a hunk apply or a merge adds to the report.
#[derive(Debug, Default)]
struct Extra {
    /// Files written with some hunks: (index, hunks applied, hunks in all).
    partial: Vec<(usize, usize, usize)>,
    /// Merged files and whether conflict markers were written.
    merged: Vec<(usize, bool)>,
}

impl Extra {
    fn render(&self, o: &mut String, stage: &Stage, dry_run: bool, s: Style) {
        for &(i, k, n) in &self.partial {
            let _ = writeln!(
                o,
                "  {:<12} {} ({k} of {n} hunks {}; the rest stays staged)",
                s.good("hunks"),
                escape(&stage.changes[i].display),
                if dry_run {
                    "would be applied"
                } else {
                    "applied"
                }
            );
        }
        for &(i, markers) in &self.merged {
            let what = if markers {
                s.warn(
                    "merged with conflict markers: resolve the <<<<<<< host / >>>>>>> staged \
                        regions",
                )
            } else {
                s.good("merged with the host's edits since the run")
            };
            let _ = writeln!(
                o,
                "  {} {}: {what}",
                s.warn("merge"),
                escape(&stage.changes[i].display)
            );
        }
    }

    fn to_json(&self, v: &mut serde_json::Value, stage: &Stage) {
        if !self.partial.is_empty() {
            v["hunks_applied"] = self
                .partial
                .iter()
                .map(|&(i, k, n)| json!({"path": stage.changes[i].display, "applied": k, "of": n}))
                .collect();
        }
        if !self.merged.is_empty() {
            v["merged"] = self
                .merged
                .iter()
                .map(|&(i, m)| json!({"path": stage.changes[i].display, "markers": m}))
                .collect();
        }
    }
}
