//! `cofferdam batch FILE [-j N]`: the task file read and every task's policy resolved and
//! checked before anything starts (a bad key or value in the last task refuses the whole
//! batch, exit 2, with the task named), then the tasks run (`batch::schedule`) with a
//! progress line on a terminal, and the summary table or `--json` at the end. The batch's
//! folder (the children's summaries and logs) is `batches/<id>/` under the storage root;
//! the fresh copies of `copy_of` tasks are `$TMPDIR/cofferdam-batch-<id>/<n>`. The folder
//! appears whole, by a rename, with `batch.json` (where the copies are) and `lock`, which the
//! batch holds locked while it runs, so `cofferdam gc` never takes a running batch's copies
//! or folder (`batch::collect`).

use crate::batch::{report, schedule, spec};
use crate::cli::BatchArgs;
use crate::context;
use crate::exit::Failure;
use std::path::{Path, PathBuf};

/// `cofferdam batch`.
pub fn batch(a: &BatchArgs, json: bool) -> Result<u8, Failure> {
    let env = context::env()?;
    let file = env.places.cwd.join(&a.file);
    let text = std::fs::read_to_string(&file).map_err(|e| {
        Failure::usage(format!(
            "cannot read the task file {}: {e}",
            crate::shown_path(&file)
        ))
    })?;
    let base = file.parent().unwrap_or(Path::new("/")).to_owned();
    let tasks = spec::parse(&a.file, &text, &base).map_err(Failure::usage)?;
    for t in &tasks {
        check_task(t, &env).map_err(|f| Failure {
            code: f.code,
            message: format!(
                "{}: task {}: {}",
                crate::shown_path(&a.file),
                t.index,
                f.message
            ),
        })?;
    }
    let jobs = match a.jobs {
        Some(0) => return Err(Failure::usage("-j 0: give at least 1 task at once")),
        Some(n) => n,
        None => schedule::default_jobs(
            std::thread::available_parallelism().map_or(1, usize::from),
            schedule::available_memory(),
        ),
    };
    let id = format!("{:x}{:04x}", crate::now_ms(), std::process::id() & 0xffff);
    // The fresh copies of `copy_of` tasks: in the temporary folder (a sandbox does not see
    // the storage root), kept after the batch since their jobs apply into them.
    let copies = std::env::temp_dir().join(format!("cofferdam-batch-{id}"));
    let dir = env.storage_root.join("batches").join(&id);
    let _running = make_batch_dir(&dir, &copies)?;
    let exe = std::env::current_exe()
        .map_err(|e| Failure::setup(format!("cannot find the cofferdam binary: {e}")))?;
    let bar = progress_bar(crate::progress::wanted(json, false), tasks.len());
    let mut on_change = |ended: usize, running: usize, _total: usize| {
        if let Some(b) = &bar {
            b.set_position(ended as u64);
            b.set_message(format!("{running} running"));
        }
    };
    let mut b = schedule::Batch {
        id: &id,
        dir: &dir,
        copies: &copies,
        exe: &exe,
        jobs,
        on_change: &mut on_change,
    };
    let (results, cancelled) = schedule::run(&mut b, &tasks);
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let code = report::exit_code(&results, cancelled);
    let doc = serde_json::json!({
        "batch": id, "dir": dir, "jobs": jobs, "cancelled": cancelled,
        "counts": report::counts(&results), "tasks": results,
    });
    let _ = std::fs::write(
        dir.join("summary.json"),
        serde_json::to_vec_pretty(&doc).unwrap_or_default(),
    );
    if json {
        crate::print_json(&doc)?;
    } else {
        crate::write_stdout(report::table(&results).as_bytes())?;
        eprintln!(
            "cofferdam: batch {id}{}: `cofferdam jobs --label batch={id}` lists its jobs; \
             logs in {}",
            if cancelled { " (cancelled)" } else { "" },
            crate::shown_path(&dir)
        );
    }
    Ok(code)
}

/// A task's policy resolved and checked as its run will (the policy crate's parsing of
/// every key's value), its labels and task id too; nothing is started.
fn check_task(t: &spec::Task, env: &context::Env) -> Result<(), Failure> {
    let mut labels = t.labels.clone();
    labels.push(format!("{}=x", spec::BATCH_LABEL));
    cofferdam_policy::orchestration::parse(&labels, t.task_id.as_deref())
        .map_err(Failure::usage)?;
    let workdir: PathBuf = match &t.place {
        spec::Place::Workdir(w) | spec::Place::CopyOf(w) => w.clone(),
    };
    let mut policy_args = t.policy.clone();
    policy_args.workdir = Some(workdir);
    context::policy(&policy_args, env, &t.command).map(|_| ())
}

/// The file of a batch's folder that says where its copies are.
pub const RECORD: &str = "batch.json";
/// The file of a batch's folder its process holds locked while it runs.
pub const LOCK: &str = "lock";

/// Make the batch's folder `dir` whole: under a dot-name (which gc skips) with `LOCK`
/// locked and `RECORD` written, then renamed into place. The returned file holds the lock
/// until the batch ends (or dies: the kernel drops it then).
fn make_batch_dir(dir: &Path, copies: &Path) -> Result<std::fs::File, Failure> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
        return Err(Failure::setup("the batch folder has no parent"));
    };
    let fresh = parent.join(format!(".{}.new", name.to_string_lossy()));
    make_private_dir(&fresh)?;
    let setup = |what: &str, e: std::io::Error| {
        Failure::setup(format!(
            "cannot {what} in the batch folder {}: {e}; check the storage root's permissions              and free space",
            crate::shown_path(&fresh)
        ))
    };
    let lock = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(fresh.join(LOCK))
        .map_err(|e| setup("create its lock", e))?;
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive)
        .map_err(|e| setup("lock its lock", e.into()))?;
    let record = serde_json::json!({ "copies": copies });
    std::fs::write(fresh.join(RECORD), record.to_string())
        .map_err(|e| setup("write its record", e))?;
    std::fs::rename(&fresh, dir).map_err(|e| setup("rename it into place", e))?;
    Ok(lock)
}

fn make_private_dir(dir: &Path) -> Result<(), Failure> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| {
            Failure::setup(format!(
                "cannot create the batch folder {}: {e}; check the storage root's permissions",
                crate::shown_path(dir)
            ))
        })
}

fn progress_bar(on: bool, total: usize) -> Option<indicatif::ProgressBar> {
    if !on {
        return None;
    }
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(total as u64),
        indicatif::ProgressDrawTarget::stderr(),
    );
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("batch [{bar:30}] {pos}/{len} done, {msg}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    Some(bar)
}
