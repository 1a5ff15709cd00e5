//! Appending to a job's trace where a failure is told, never dropped: the one place the CLI
//! commands write trace events. Owns the warning's wording; may not decide what a command
//! does when its record is incomplete (the command goes on, as the trace is not the stage).

use cofferdam_record::trace::TraceEventKind;
use cofferdam_stage::trace_log::TraceLog;

/// Append `events` (in order, in one write) to `trace`. On a failure the user is told on
/// stderr, with the cause and what it means for the record, and the same text (without the
/// `cofferdam: warning:` prefix) is returned so a bundle written afterwards can carry it.
/// `what` names the events for a person ("the apply's outcome").
pub(crate) fn append(
    trace: &mut TraceLog,
    events: Vec<(u64, TraceEventKind)>,
    what: &str,
) -> Option<String> {
    let n = events.len();
    let e = trace.append_all(events).err()?;
    let warning = format!(
        "the job's trace could not record {what} ({n} event(s) lost): {e}; the trace of this \
         job is incomplete from here (what was done is as reported, only its record is \
         missing); free space or fix the trace file's permissions for later events"
    );
    eprintln!("cofferdam: warning: {}", crate::shown_text(&warning));
    Some(warning)
}
