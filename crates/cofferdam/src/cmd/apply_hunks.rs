//! The hunk and merge side of `cofferdam apply`: `--hunks ID,...`, `--interactive` and
//! `--merge[=markers]` (issue 22). It turns the user's choice into what the apply engine
//! takes (a selection of paths and, per file, the content to write:
//! `cofferdam_stage::apply::Rewrite`); the hunks, the merge and the writes are
//! `cofferdam_stage::{texts, hunk, merge, apply}`'s. It may not write anything itself
//! except a base the engine's record needs (`cofferdam_stage::base::keep`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::File;
use std::io::{BufRead, Write};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use cofferdam_record::shown::escape;
use cofferdam_stage::apply::{Checked, Rewrite};
use cofferdam_stage::conflict::ConflictReason;
use cofferdam_stage::fingerprint::{HostRoot, HostState};
use cofferdam_stage::hunk::{Line, groups, shown};
use cofferdam_stage::job::Job;
use cofferdam_stage::merge;
use cofferdam_stage::review::Stage;
use cofferdam_stage::texts::{FileHunks, MergeInputs, file_hunks, merge_inputs};
use serde_json::json;

use crate::exit::Failure;
use crate::style::Style;

/// The open roots the texts are read from.
struct Roots {
    target: File,
    upper: File,
}

fn roots(job: &Job, workdir: &Path) -> Result<Roots, Failure> {
    let open = |p: &Path| {
        File::open(p).map_err(|e| Failure::setup(format!("cannot open {}: {e}", p.display())))
    };
    Ok(Roots {
        target: open(workdir)?,
        upper: open(&job.upper())?,
    })
}

/// Every remaining change's hunks, by change index.
fn all_hunks(job: &Job, stage: &Stage, r: &Roots) -> Result<BTreeMap<usize, FileHunks>, Failure> {
    let mut out = BTreeMap::new();
    for (i, c) in stage.changes.iter().enumerate() {
        if !stage.is_remaining(i) {
            continue;
        }
        let fh = file_hunks(
            job.dir(),
            r.target.as_fd(),
            r.upper.as_fd(),
            &stage.ledger,
            c,
        )
        .map_err(Failure::setup)?;
        if let Some(fh) = fh.filter(|f| f.remaining().next().is_some()) {
            out.insert(i, fh);
        }
    }
    Ok(out)
}

/// The hunks of one change as `diff --json` shows them.
pub fn hunks_json(job: &Job, stage: &Stage, workdir: &Path, i: usize) -> Option<serde_json::Value> {
    let r = roots(job, workdir).ok()?;
    let c = stage.changes.get(i)?;
    let fh = file_hunks(
        job.dir(),
        r.target.as_fd(),
        r.upper.as_fd(),
        &stage.ledger,
        c,
    )
    .ok()??;
    let list: Vec<_> = fh
        .hunks
        .iter()
        .enumerate()
        .filter(|(_, h)| !fh.applied.contains(&h.id))
        .map(|(k, h)| {
            let (header, lines) = shown(&fh.base, &fh.staged, &fh.hunks, k..k + 1);
            json!({"id": h.id, "header": header,
                   "old_start": h.old.start + 1, "old_lines": h.old.len(),
                   "new_start": h.new.start + 1, "new_lines": h.new.len(),
                   "lines": lines.iter().map(line_text).collect::<Vec<_>>()})
        })
        .collect();
    Some(json!({"hunks": list, "hunks_applied": fh.applied.len()}))
}

fn line_text(l: &Line<'_>) -> String {
    let (mark, body) = match l {
        Line::Same(b) => (' ', b),
        Line::Removed(b) => ('-', b),
        Line::Added(b) => ('+', b),
    };
    let text = String::from_utf8_lossy(body);
    let text = text.strip_suffix('\n').unwrap_or(&text);
    format!("{mark}{}", cofferdam_stage::diff::sanitize(text))
}

/// What a hunk apply asks of the engine.
#[derive(Debug, Default)]
pub struct HunkPlan {
    /// The files to select (whole-file applies and hunk applies alike).
    pub paths: Vec<Vec<u8>>,
    /// Files written with some hunks, by change index.
    pub rewrite: HashMap<usize, Rewrite>,
    /// For each such file: (index, hunks applied after this apply, hunks in all).
    pub partial: Vec<(usize, usize, usize)>,
}

/// The plan for `chosen` hunk ids per change; keeps each base the ledger will name.
fn plan(
    job: &Job,
    stage: &Stage,
    all: &BTreeMap<usize, FileHunks>,
    chosen: &BTreeMap<usize, BTreeSet<String>>,
    dry_run: bool,
) -> Result<HunkPlan, Failure> {
    let mut p = HunkPlan::default();
    for (&i, ids) in chosen {
        let (Some(fh), Some(c)) = (all.get(&i), stage.changes.get(i)) else {
            continue;
        };
        p.paths.push(c.path.clone());
        if let Some((bytes, partial)) = fh.with(ids) {
            if fh.base_from_host && !dry_run {
                cofferdam_stage::base::keep(job.dir(), &fh.base_blake3, &fh.base).map_err(|e| {
                    Failure::setup(format!(
                        "cannot keep the sealed copy of {} in job {}: {e}",
                        c.display,
                        job.id()
                    ))
                })?;
            }
            p.partial.push((i, partial.hunks.len(), fh.hunks.len()));
            p.rewrite.insert(
                i,
                Rewrite {
                    bytes,
                    against: None,
                    partial: Some(partial),
                },
            );
        }
    }
    Ok(p)
}

/// `--hunks ID,...`: the plan, or a usage error naming an unknown id.
pub fn by_ids(
    job: &Job,
    stage: &Stage,
    workdir: &Path,
    ids: &[String],
    dry_run: bool,
) -> Result<HunkPlan, Failure> {
    let r = roots(job, workdir)?;
    let all = all_hunks(job, stage, &r)?;
    let mut owner: HashMap<&str, usize> = HashMap::new();
    for (&i, fh) in &all {
        for h in fh.remaining() {
            owner.insert(h.id.as_str(), i);
        }
    }
    let mut chosen: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
    for id in ids.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
        let Some(&i) = owner.get(id) else {
            return Err(Failure::usage(format!(
                "no staged hunk of job {} has the id {}; list the hunks and their ids with \
                 `cofferdam diff {} --json` (a hunk already applied has none)",
                job.id(),
                escape(id),
                job.id()
            )));
        };
        chosen.entry(i).or_default().insert(id.to_owned());
    }
    if chosen.is_empty() {
        return Err(Failure::usage(
            "--hunks names no hunk; give ids from `cofferdam diff JOB --json`",
        ));
    }
    plan(job, stage, &all, &chosen, dry_run)
}

const HELP: &str = "y - apply this hunk\nn - do not apply this hunk\ns - split it into \
                    smaller hunks\nq - quit; apply the hunks chosen so far\n? - this help\n";

/// `--interactive`: ask hunk by hunk on the terminal; `None` when nothing was chosen.
pub fn interactive(
    job: &Job,
    stage: &Stage,
    workdir: &Path,
    s: Style,
) -> Result<Option<HunkPlan>, Failure> {
    use std::io::IsTerminal;
    if !std::io::stdin().is_terminal() {
        return Err(Failure::usage(format!(
            "--interactive asks on a terminal, and standard input is not one; choose hunks \
             by id instead: `cofferdam diff {} --json` lists them, `cofferdam apply {} \
             --hunks ID,...` applies them",
            job.id(),
            job.id()
        )));
    }
    let r = roots(job, workdir)?;
    let all = all_hunks(job, stage, &r)?;
    let mut chosen: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut out = std::io::stdout().lock();
    let io = |e: std::io::Error| Failure::setup(format!("cannot talk to the terminal: {e}"));
    'files: for (&i, fh) in &all {
        let c = &stage.changes[i];
        let left: Vec<usize> = (0..fh.hunks.len())
            .filter(|&k| !fh.applied.contains(&fh.hunks[k].id))
            .collect();
        // Review groups over the remaining hunks, each a list of hunk indices.
        let rem: Vec<_> = left.iter().map(|&k| fh.hunks[k].clone()).collect();
        let mut queue: Vec<Vec<usize>> = groups(&rem)
            .into_iter()
            .map(|g| g.map(|j| left[j]).collect())
            .collect();
        queue.reverse();
        writeln!(
            out,
            "{}",
            s.heading(&format!("--- a/{0}\n+++ b/{0}", escape(&c.display)))
        )
        .map_err(io)?;
        while let Some(group) = queue.pop() {
            let (Some(&first), Some(&last)) = (group.first(), group.last()) else {
                continue;
            };
            let (header, lines) = shown(&fh.base, &fh.staged, &fh.hunks, first..last + 1);
            let mut text = format!("{}\n", s.dim(&header));
            for l in &lines {
                let t = line_text(l);
                text.push_str(&match l {
                    Line::Same(_) => t,
                    Line::Removed(_) => s.bad(&t),
                    Line::Added(_) => s.good(&t),
                });
                text.push('\n');
            }
            loop {
                write!(
                    out,
                    "{text}Apply this hunk to {} [y,n,s,q,?]? ",
                    escape(&c.display)
                )
                .map_err(io)?;
                out.flush().map_err(io)?;
                let mut answer = String::new();
                if input.read_line(&mut answer).map_err(io)? == 0 {
                    writeln!(out).map_err(io)?;
                    break 'files;
                }
                match answer.trim() {
                    "y" => {
                        let e = chosen.entry(i).or_default();
                        e.extend(group.iter().map(|&k| fh.hunks[k].id.clone()));
                        break;
                    }
                    "n" => break,
                    "q" => break 'files,
                    "s" if group.len() > 1 => {
                        writeln!(out, "split into {} hunks", group.len()).map_err(io)?;
                        for &k in group.iter().rev() {
                            queue.push(vec![k]);
                        }
                        break;
                    }
                    "s" => writeln!(out, "this hunk cannot be split further").map_err(io)?,
                    _ => write!(out, "{HELP}").map_err(io)?,
                }
            }
        }
    }
    drop(out);
    if chosen.is_empty() {
        return Ok(None);
    }
    plan(job, stage, &all, &chosen, false).map(Some)
}

/// What `--merge` made of the refused conflicts.
#[derive(Debug, Default)]
pub struct MergePlan {
    /// The merged content to write, by change index.
    pub rewrite: HashMap<usize, Rewrite>,
    /// Merged changes and whether conflict markers were written.
    pub merged: Vec<(usize, bool)>,
    /// Conflicts that could not be merged: the change, why, the conflicting regions.
    pub refused: Vec<(usize, String, Vec<merge::Conflict>)>,
}

/// Whether a conflict is one a merge can resolve: the host's content changed, not its
/// type, mode or the way to it.
fn mergeable(reason: &ConflictReason) -> bool {
    matches!(
        reason,
        ConflictReason::ContentChanged { .. } | ConflictReason::ChangedAfterRunStart { .. }
    )
}

/// `--merge`: merge each refused text file three ways (base: the host file as sealed;
/// ours: the host file now; theirs: the staged file).
pub fn merges(
    job: &Job,
    stage: &Stage,
    workdir: &Path,
    checked: &Checked,
    markers: bool,
) -> Result<MergePlan, Failure> {
    let r = roots(job, workdir)?;
    let host = HostRoot::open(workdir).map_err(Failure::setup)?;
    let mut p = MergePlan::default();
    for cf in &checked.conflicts {
        let c = &stage.changes[cf.index];
        if !mergeable(&cf.reason) {
            p.refused
                .push((cf.index, cf.reason.to_string(), Vec::new()));
            continue;
        }
        let inputs = merge_inputs(
            job.dir(),
            r.target.as_fd(),
            r.upper.as_fd(),
            &stage.ledger,
            c,
        )
        .map_err(Failure::setup)?;
        let (base, ours, theirs) = match inputs {
            MergeInputs::Texts { base, ours, theirs } => (base, ours, theirs),
            MergeInputs::Not(why) => {
                p.refused.push((cf.index, why.to_owned(), Vec::new()));
                continue;
            }
        };
        // The host file as read, which the write checks it still is.
        let now = host
            .fingerprint(Path::new(std::ffi::OsStr::from_bytes(&c.path)))
            .map_err(Failure::setup)?;
        let same_mode = match (&now.host, &c.recorded.host) {
            (
                HostState::File {
                    mode: a, blake3, ..
                },
                HostState::File { mode: b, .. },
            ) => {
                if blake3.as_deref() != Some(blake3::hash(&ours).to_hex().as_str()) {
                    p.refused.push((
                        cf.index,
                        "the host file changed while it was read".to_owned(),
                        Vec::new(),
                    ));
                    continue;
                }
                a == b
            }
            _ => false,
        };
        if !same_mode {
            p.refused.push((
                cf.index,
                "its permissions changed on the host since the run: modes are not merged"
                    .to_owned(),
                Vec::new(),
            ));
            continue;
        }
        let m = merge::merge(&base, &ours, &theirs);
        if !m.conflicts.is_empty() && !markers {
            p.refused.push((
                cf.index,
                format!(
                    "the host and the stage changed the same lines ({} region(s))",
                    m.conflicts.len()
                ),
                m.conflicts,
            ));
            continue;
        }
        p.merged.push((cf.index, !m.conflicts.is_empty()));
        p.rewrite.insert(
            cf.index,
            Rewrite {
                bytes: m.text,
                against: Some(now.host),
                partial: None,
            },
        );
    }
    Ok(p)
}

/// The refused merges, for the refusal message (text).
pub fn render_refused(o: &mut String, stage: &Stage, p: &MergePlan, s: Style) {
    use std::fmt::Write as _;
    for (i, markers) in &p.merged {
        let _ = writeln!(
            o,
            "  {} {}: merges{}; written once the others are resolved",
            s.good("mergeable"),
            escape(&stage.changes[*i].display),
            if *markers {
                " with markers"
            } else {
                " cleanly"
            }
        );
    }
    for (i, why, conflicts) in &p.refused {
        let _ = writeln!(
            o,
            "  {} {}: {}",
            s.bad("not merged"),
            escape(&stage.changes[*i].display),
            escape(why)
        );
        for cf in conflicts {
            let _ = writeln!(
                o,
                "    @@ lines {}-{} as sealed @@",
                cf.base.start + 1,
                cf.base.end.max(cf.base.start + 1)
            );
            for (mark, text) in [('<', &cf.ours), ('>', &cf.theirs)] {
                for l in String::from_utf8_lossy(text).lines() {
                    let _ = writeln!(o, "    {mark} {}", cofferdam_stage::diff::sanitize(l));
                }
                if mark == '<' {
                    let _ = writeln!(o, "    =");
                }
            }
        }
    }
    if p.refused.iter().any(|(_, _, c)| !c.is_empty()) {
        let _ = writeln!(
            o,
            "fix: edit one side so the lines agree, or write both with conflict markers with \
             `--merge=markers` and resolve them in the file"
        );
    }
}

/// The refused merges (JSON).
pub fn refused_json(stage: &Stage, p: &MergePlan) -> serde_json::Value {
    p.refused
        .iter()
        .map(|(i, why, conflicts)| {
            json!({"path": stage.changes[*i].display, "message": why,
                   "conflicts": conflicts.iter().map(|c| json!({
                       "base_start": c.base.start + 1, "base_lines": c.base.len(),
                       "host": String::from_utf8_lossy(&c.ours),
                       "staged": String::from_utf8_lossy(&c.theirs)})).collect::<Vec<_>>()})
        })
        .collect()
}
