//! `cofferdam diff [JOB] [--path P]… [--stat]`: what applying the staged changes would do,
//! as unified diffs (text) or one line each (binary, large, symlink, mode-only, deleted,
//! opaque). A change that runs code or changes policy once applied is marked (`! runs
//! code: …`). The diffs are `cofferdam_stage::diff`'s; this module picks the changes (still
//! staged, at or beneath each `--path`), colours and prints. It changes nothing and takes
//! no lock.

use crate::cli::DiffArgs;
use crate::cmd::jobref;
use crate::cmd::jobrules::{
    job_failure, kind_word, normalize_paths, require_sealed, stage_failure,
};
use crate::exit::{BUSY, Failure, OK};
use crate::style::Style;
use cofferdam_record::shown::{Keep, escape, escape_with};
use cofferdam_stage::apply;
use cofferdam_stage::conflict::is_git_index;
use cofferdam_stage::diff::{FileDiff, Sides, diff_change};
use cofferdam_stage::fingerprint::HostRoot;
use cofferdam_stage::job::StageState;
use cofferdam_stage::review::{RollupItem, RollupRow, Stage, StagedChange, rollup};
use cofferdam_stage::select::is_at_or_beneath;
use serde_json::json;
use std::fmt::Write as _;
use std::os::fd::AsFd;

/// `cofferdam diff`.
pub fn diff(a: &DiffArgs, json: bool, s: Style) -> Result<u8, Failure> {
    if a.against_parent {
        return super::diff_parent::diff(&a.job, json);
    }
    let (env, job) = jobref::open(&a.job)?;
    let mut state = job.state().map_err(job_failure)?;
    if state.state == StageState::Active {
        if job.is_locked().map_err(job_failure)? {
            return Err(Failure {
                code: BUSY,
                message: format!(
                    "job {} is still running; diff it when it has ended",
                    job.id()
                ),
            });
        }
        state.state = StageState::Interrupted;
    }
    if state.state == StageState::Interrupted
        && let Ok(lock) = job.try_lock()
    {
        // Sealed on demand (`crate::cmd::recover`).
        state = crate::cmd::recover::settled_state(&job, &lock)?;
    }
    let gone = match state.state {
        StageState::Discarded => Some(("discarded", "was dropped, its stage is discarded")),
        StageState::Applied if !job.has_stage() => Some((
            "applied",
            "was applied and dropped: its changes are in the workdir",
        )),
        _ => None,
    };
    if let Some((word, why)) = gone {
        // Nothing is staged any more: that is an answer, not an error.
        let message = format!("nothing staged: job {} {why}", job.id());
        return if json {
            let v = json!({"job": job.id(), "state": word, "changes": [], "message": message});
            crate::print_json(&v).map(|()| OK)
        } else {
            crate::write_stdout(format!("{message}\n").as_bytes()).map(|()| OK)
        };
    }
    require_sealed(&job, &state, "review")?;
    let stage = Stage::load(&job).map_err(stage_failure)?;
    let workdir = state.workdir.clone();
    if let Some(view) = apply::inspect(&workdir, &stage.ledger).map_err(Failure::setup)? {
        eprintln!(
            "cofferdam: an apply of job {} was interrupted ({} path(s) written, {} not); \
             `cofferdam apply {}` finishes it",
            job.id(),
            view.written.len(),
            view.not_written.len(),
            job.id()
        );
    }
    let paths = normalize_paths(&a.paths, &workdir, &env.places.cwd)?;
    let shown: Vec<usize> = (0..stage.changes.len())
        .filter(|&i| stage.is_remaining(i))
        .filter(|&i| {
            paths.is_empty()
                || paths
                    .iter()
                    .any(|p| p.is_empty() || is_at_or_beneath(&stage.changes[i].path, p))
        })
        .collect();
    let applied = stage.applied_count();

    let host = HostRoot::open(&workdir)
        .map_err(|e| Failure::setup(format!("{e}; the job applies to that directory")))?;
    let open = |p: &std::path::Path| {
        std::fs::File::open(p)
            .map_err(|e| Failure::setup(format!("cannot open {}: {e}", p.display())))
    };
    let target = open(&workdir)?;
    let upper = open(&job.upper())?;
    let sides = Sides {
        host: &host,
        target: target.as_fd(),
        upper: upper.as_fd(),
        run_started_at_unix_ms: stage.run_started_at_unix_ms,
        ledger: Some(&stage.ledger),
    };
    let mut diffs: Vec<FileDiff> = Vec::with_capacity(shown.len());
    for &i in &shown {
        diffs.push(diff_change(&sides, &stage.changes[i]).map_err(Failure::setup)?);
    }

    if json {
        // Each text change's hunks, with the ids `apply --hunks` takes.
        let changes: Vec<serde_json::Value> = diffs
            .iter()
            .zip(&shown)
            .map(|(d, &i)| {
                let mut v = serde_json::to_value(d).unwrap_or_default();
                // The path's identity, when its display form cannot carry it
                // (spec/run-bundle-format.txt: use these bytes, not the display text).
                let bytes = &stage.changes[i].path;
                if !cofferdam_stage::seal::display_path(bytes).1
                    && let Some(obj) = v.as_object_mut()
                {
                    obj.insert("path_bytes".into(), json!(bytes));
                }
                if d.unified.is_some()
                    && let Some(h) = crate::cmd::apply_hunks::hunks_json(&job, &stage, &workdir, i)
                    && let (Some(obj), Some(hobj)) = (v.as_object_mut(), h.as_object())
                {
                    obj.extend(hobj.clone());
                }
                v
            })
            .collect();
        crate::print_json(&json!({
            "job": job.id(),
            "changes": changes,
            "applied_not_shown": applied,
            "insertions": diffs.iter().map(|d| d.insertions).sum::<usize>(),
            "deletions": diffs.iter().map(|d| d.deletions).sum::<usize>(),
        }))?;
        return Ok(OK);
    }
    // A git index the host rewrote is taken by apply, not refused
    // (`conflict::git_index_taken`): ask the apply check, only when one is in view.
    let index_in_view = diffs
        .iter()
        .zip(&shown)
        .any(|(d, &i)| d.conflict.is_some() && is_git_index(&stage.changes[i].path));
    let taken_set: std::collections::HashSet<usize> = if index_in_view {
        apply::check(
            &workdir,
            &job.upper(),
            &stage,
            &shown,
            &apply::Options::default(),
        )
        .map(|c| c.git_index_taken.iter().map(|cf| cf.index).collect())
        .unwrap_or_default()
    } else {
        std::collections::HashSet::new()
    };
    let taken: Vec<bool> = shown.iter().map(|i| taken_set.contains(i)).collect();
    let mut o = String::new();
    if a.stat {
        let changes = shown_changes(&stage, &shown);
        render_stat(&mut o, &diffs, &changes, &taken, a.all, s);
    } else {
        for (d, taken) in diffs.iter().zip(&taken) {
            render_diff(&mut o, d, *taken, s);
        }
    }
    if diffs.is_empty() {
        let _ = writeln!(
            o,
            "no staged changes{}",
            if paths.is_empty() {
                ""
            } else {
                " at those paths"
            }
        );
    }
    if applied > 0 {
        let _ = writeln!(
            o,
            "{}",
            s.dim(&format!("({applied} applied change(s) not shown)"))
        );
    }
    crate::pager::show(o.as_bytes(), a.no_pager)?;
    Ok(OK)
}

/// `index_taken`: the change is a git index apply takes despite its conflict.
fn render_diff(o: &mut String, d: &FileDiff, index_taken: bool, s: Style) {
    let _ = writeln!(
        o,
        "{}",
        s.heading(&format!("diff {} ({})", escape(&d.path), kind_word(d.kind)))
    );
    if let Some(c) = d.conflict.as_ref().filter(|_| index_taken) {
        let _ = writeln!(
            o,
            "{}",
            s.warn(&format!(
                "! {}: a git index is a cache git rewrites (a `git status` does), so apply \
                 takes the staged one and warns",
                escape(c)
            ))
        );
    } else if let Some(c) = &d.conflict {
        let _ = writeln!(
            o,
            "{}",
            s.bad(&format!(
                "! {}: apply would refuse it",
                escape(&c.to_string())
            ))
        );
    }
    if let Some(why) = &d.sensitive {
        let _ = writeln!(
            o,
            "{}",
            s.bad(&format!(
                "! {}: a bare `apply` leaves it staged",
                escape(why)
            ))
        );
    }
    if let Some(sum) = &d.summary {
        let _ = writeln!(o, "{}", s.warn(&escape(sum)));
    }
    if let Some(u) = &d.unified {
        for line in u.lines() {
            let line = &escape_with(line, Keep::TAB);
            let painted = if line.starts_with("+++") || line.starts_with("---") {
                s.heading(line)
            } else if line.starts_with("@@") {
                s.dim(line)
            } else if line.starts_with('+') {
                s.good(line)
            } else if line.starts_with('-') {
                s.bad(line)
            } else {
                line.to_owned()
            };
            let _ = writeln!(o, "{painted}");
        }
    }
}

/// The staged changes behind the shown diffs, in the same order.
fn shown_changes<'a>(stage: &'a Stage, shown: &[usize]) -> Vec<&'a StagedChange> {
    shown.iter().map(|&i| &stage.changes[i]).collect()
}

/// `changes[i]` is the staged change behind `diffs[i]`; unless `all`, directories added
/// whole are rolled up into one line (changes that run code or conflict stay listed).
fn render_stat(
    o: &mut String,
    diffs: &[FileDiff],
    changes: &[&StagedChange],
    index_taken: &[bool],
    all: bool,
    s: Style,
) {
    let rows = if all {
        (0..diffs.len()).map(RollupRow::One).collect()
    } else {
        let items: Vec<RollupItem<'_>> = changes
            .iter()
            .zip(diffs)
            .map(|(c, d)| RollupItem {
                path: &c.path,
                kind: c.kind,
                new_type: c.new_type,
                size: c.size,
                keep: d.conflict.is_some() || d.sensitive.is_some(),
            })
            .collect();
        rollup(&items)
    };
    let width = diffs
        .iter()
        .map(|d| d.path.chars().count())
        .max()
        .unwrap_or(0)
        .min(60);
    let (ins, del) = diffs
        .iter()
        .fold((0, 0), |(i, d), f| (i + f.insertions, d + f.deletions));
    for row in rows {
        let (d, taken) = match row {
            RollupRow::One(i) => (&diffs[i], index_taken[i]),
            RollupRow::Dir {
                index,
                files,
                dirs,
                bytes,
            } => {
                let d = &diffs[index];
                let note = crate::cmd::status::rollup_note(files, dirs, bytes, s);
                let path = format!("{}/", escape(&d.path));
                let _ = writeln!(o, " {path:<width$} | {}{note}", s.dim(kind_word(d.kind)));
                continue;
            }
        };
        let what = if d.unified.is_some() {
            let n = d.insertions + d.deletions;
            let bar = n.min(40);
            let plus = (bar * d.insertions).checked_div(n).unwrap_or(0);
            format!(
                "{:>5} {}{}",
                n,
                s.good(&"+".repeat(plus)),
                s.bad(&"-".repeat(bar - plus))
            )
        } else {
            s.dim(&escape(d.summary.as_deref().unwrap_or(kind_word(d.kind))))
        };
        let mut mark = if taken {
            s.warn("  (host rewrote this git index: apply takes the staged one)")
        } else if d.conflict.is_some() {
            s.bad(" !")
        } else {
            String::new()
        };
        if let Some(why) = &d.sensitive {
            mark.push_str(&s.bad(&format!("  ! {}", escape(why))));
        }
        // A text diff's summary (where a new file's mode is) is not on the stat line.
        let mode = match (&d.unified, &d.mode) {
            (Some(_), Some(m)) if d.old_mode.is_none() || !d.mode_flags.is_empty() => {
                let flags = if d.mode_flags.is_empty() {
                    String::new()
                } else {
                    format!(" {}", d.mode_flags.join(", "))
                };
                let text = format!("  mode {m}{flags}");
                if d.mode_flags.iter().any(|f| *f != "executable") {
                    s.bad(&text)
                } else {
                    s.dim(&text)
                }
            }
            _ => String::new(),
        };
        let _ = writeln!(o, " {:<width$} | {what}{mode}{mark}", escape(&d.path));
    }
    let _ = writeln!(
        o,
        " {} path(s) changed, {ins} insertion(s)(+), {del} deletion(s)(-)",
        diffs.len()
    );
}
