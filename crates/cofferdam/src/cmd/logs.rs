//! `cofferdam logs [JOB]`: print what `run --capture` saved of the command's output: its
//! stdout to stdout and its stderr to stderr (a terminal transcript, in pty mode, is the
//! stdout). On a terminal the workload's control characters are shown escaped, so its
//! output cannot move the cursor or retitle the window; piped, the bytes go as saved.
//! Reads the job only.

use crate::context;
use crate::exit::{Failure, OK};
use cofferdam_record::bundle::CapturedStream;
use serde_json::json;
use std::io::IsTerminal as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// `cofferdam logs`.
pub fn logs(address: &str, json: bool) -> Result<u8, Failure> {
    let env = context::env()?;
    let store = cofferdam_stage::job::JobStore::open(&env.storage_root)
        .map_err(crate::cmd::jobrules::job_failure)?;
    let job = crate::cmd::jobref::resolve(&store, address, &env.places.cwd)?;
    let id = job.id().to_owned();
    let bytes = std::fs::read(job.bundle_path()).map_err(|e| {
        Failure::usage(format!(
            "job {id} has no Run Bundle yet ({e}): its run is still going or was interrupted; \
             `cofferdam status {id}` says which"
        ))
    })?;
    let bundle = cofferdam_record::read_bundle(&bytes).map_err(|e| {
        Failure::setup(format!(
            "{}: invalid Run Bundle: {e}",
            job.bundle_path().display()
        ))
    })?;
    let out = &bundle.run.output;
    if out.stdout.is_none() && out.stderr.is_none() {
        return Err(Failure::usage(format!(
            "job {id} captured no output: its command's output went only to the terminal; \
             run with `cofferdam run --capture -- COMMAND` to keep it in the job (up to 16 MiB \
             per stream)"
        )));
    }
    let read = |s: &Option<CapturedStream>| -> Result<Option<(Vec<u8>, bool)>, Failure> {
        let Some(s) = s else { return Ok(None) };
        let text = match (&s.path, &s.text) {
            (Some(p), _) => {
                let p = resolve_path(job.dir(), p);
                std::fs::read(&p).map_err(|e| {
                    Failure::setup(format!("cannot read the capture {}: {e}", p.display()))
                })?
            }
            (None, Some(t)) => t.clone().into_bytes(),
            (None, None) => Vec::new(),
        };
        Ok(Some((text, s.truncated)))
    };
    let (stdout, stderr) = (read(&out.stdout)?, read(&out.stderr)?);
    if json {
        let stream = |s: &Option<(Vec<u8>, bool)>| {
            s.as_ref()
                .map(|(b, t)| json!({"text": String::from_utf8_lossy(b), "truncated": t}))
        };
        crate::print_json(&json!({
            "job": id, "stdout": stream(&stdout), "stderr": stream(&stderr),
        }))?;
        return Ok(OK);
    }
    if let Some((b, truncated)) = &stdout {
        if std::io::stdout().is_terminal() {
            crate::write_stdout(crate::shown_text(&String::from_utf8_lossy(b)).as_bytes())?;
        } else {
            crate::write_stdout(b)?;
        }
        if *truncated {
            eprintln!("cofferdam: job {id}: stdout was cut at the capture limit");
        }
    }
    if let Some((b, truncated)) = &stderr {
        let mut err = std::io::stderr().lock();
        let _ = if std::io::stderr().is_terminal() {
            err.write_all(crate::shown_text(&String::from_utf8_lossy(b)).as_bytes())
        } else {
            err.write_all(b)
        };
        if *truncated {
            let _ = writeln!(
                err,
                "cofferdam: job {id}: stderr was cut at the capture limit"
            );
        }
    }
    Ok(OK)
}

fn resolve_path(job_dir: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        job_dir.join(p)
    }
}
