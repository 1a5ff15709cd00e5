//! `cofferdam export JOB [-o FILE]`: write a sealed job to one archive (tar + zstd) that
//! `cofferdam import` makes a job of on another machine. The archive format and the walk
//! are `cofferdam_stage::archive`'s; this module resolves and locks the job, creates the
//! output file (never replacing one) and reports.

use crate::cli::ExportArgs;
use crate::cmd::jobref;
use crate::cmd::jobrules::{lock, require_sealed};
use crate::cmd::recover::settled_state;
use crate::exit::{Failure, OK};
use cofferdam_stage::archive::{ArchiveError, export::export as write_archive};
use serde_json::json;
use std::io::Write;

/// zstd level of the archive: libzstd's default, a good speed for stages of source text.
const LEVEL: i32 = 3;

/// The exit code and message of an export or import failure.
pub(crate) fn archive_failure(e: ArchiveError) -> Failure {
    match e {
        ArchiveError::Refused { .. } => Failure {
            code: crate::exit::INVALID,
            message: e.to_string(),
        },
        ArchiveError::Unsupported { .. } | ArchiveError::NoWorkdir { .. } => Failure::usage(e),
        ArchiveError::Job(j) => crate::cmd::jobrules::job_failure(j),
        ArchiveError::Io { .. } | ArchiveError::Changed { .. } => Failure::setup(e),
    }
}

/// `cofferdam export`.
pub fn export(a: &ExportArgs, json: bool) -> Result<u8, Failure> {
    let (env, job) = jobref::open(&a.job)?;
    let lock = lock(&job, "export")?;
    let state = settled_state(&job, &lock)?;
    require_sealed(&job, &state, "export")?;
    if !job.has_stage() {
        return Err(Failure::usage(format!(
            "job {} has no stage on disk any more; there is nothing to export",
            job.id()
        )));
    }
    let out = a
        .output
        .clone()
        .unwrap_or_else(|| env.places.cwd.join(format!("{}.tar.zst", job.id())));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&out)
        .map_err(|e| {
            let fix = if e.kind() == std::io::ErrorKind::AlreadyExists {
                "; remove it or give another name with -o FILE"
            } else {
                ""
            };
            Failure::usage(format!(
                "cannot create {}: {e}{fix}",
                crate::shown_path(&out)
            ))
        })?;
    let mut buf = std::io::BufWriter::new(file);
    let written = write_archive(&job, &mut buf, LEVEL)
        .map_err(archive_failure)
        .and_then(|x| {
            let file = buf
                .into_inner()
                .map_err(|e| Failure::setup(format!("cannot write {}: {e}", out.display())))?;
            file.sync_all()
                .map_err(|e| Failure::setup(format!("cannot write {}: {e}", out.display())))?;
            Ok(x)
        });
    let written = match written {
        Ok(w) => w,
        Err(f) => {
            let _ = std::fs::remove_file(&out);
            return Err(f);
        }
    };
    drop(lock);
    let size = std::fs::metadata(&out).map(|m| m.len()).ok();
    if json {
        crate::print_json(&json!({
            "job": job.id(), "archive": out, "archive_bytes": size,
            "format_version": written.manifest.version,
            "stage_entries": written.manifest.stage.len(),
            "data_bytes": written.data_bytes,
        }))?;
    } else {
        let mut text = format!(
            "exported job {} to {} ({} stage entries, {} bytes of data",
            job.id(),
            crate::shown_path(&out),
            written.manifest.stage.len(),
            written.data_bytes
        );
        if let Some(size) = size {
            text.push_str(&format!(", archive {size} bytes"));
        }
        text.push_str(")\nimport it with `cofferdam import FILE [--workdir DIR]`\n");
        crate::write_stdout(text.as_bytes())?;
    }
    std::io::stdout().flush().ok();
    Ok(OK)
}
